"""What `serve` and TritonServer take from the command line in force, the port checks, the
error summary of a failed start, and serve's help."""

from __future__ import annotations

import argparse
import os
import socket

import pytest

from ge_python_backend.cli import build_parser, serve
from ge_python_backend.ops import ports
from ge_python_backend.ops.server import HTTP_INFERENCE_OFF_HEADER, ServerError, TritonInstall, TritonServer
from ge_python_backend.ops.server import arguments_in_force as in_force


def test_the_last_value_of_an_option_is_in_force_in_either_spelling():
    assert in_force(["--http-port=1", "--load-model", "a", "--load-model=b", "--strict", "--http-port", "2"]) == {
        "http-port": ["1", "2"],
        "load-model": ["a", "b"],
        "strict": [""],
    }


def test_extra_arguments_decide_ports_and_readiness_rules(tmp_path):
    server = TritonServer(
        tmp_path,
        http_port=1000,
        extra_args=["--http-port=9000", "--exit-on-error=false", "--model-control-mode", "explicit"],
    )
    assert (server.http_port, server.http_address) == (9000, "127.0.0.1:9000")
    assert not server.exit_on_error and server.model_control_mode == "explicit"
    command = server.command(TritonInstall(tmp_path / "tritonserver", tmp_path, None), tmp_path)
    assert "--exit-on-error=false" in command and command[-1] == "explicit"
    server.close()


def test_without_http_there_is_nothing_to_check_readiness_with(tmp_path):
    with pytest.raises(ServerError, match="--allow-http=false: the server's readiness is checked over HTTP"):
        TritonServer(tmp_path, extra_args=["--allow-http=false"])


def test_http_inference_off_restricts_the_inference_api_with_a_secret_value(tmp_path):
    install = TritonInstall(tmp_path / "tritonserver", tmp_path, None)
    server = TritonServer(tmp_path, http_inference=False)
    (restriction,) = [a for a in server.command(install, tmp_path) if a.startswith("--http-restricted-api=")]
    assert restriction.startswith(f"--http-restricted-api=inference:{HTTP_INFERENCE_OFF_HEADER}=")
    assert len(restriction.rsplit("=", 1)[1]) == 32
    server.close()


@pytest.mark.parametrize(
    "address, flag, server_args, expected",
    [
        ("127.0.0.1", None, [], True),
        ("::1", None, [], True),
        ("localhost", None, [], True),
        ("0.0.0.0", None, [], False),
        ("10.1.2.3", None, [], False),
        ("0.0.0.0", "on", [], True),
        ("127.0.0.1", "off", [], False),
        ("0.0.0.0", None, ["--http-restricted-api=inference:k=v"], True),
    ],
)
def test_http_inference_is_on_by_default_only_on_loopback(address, flag, server_args, expected):
    args = argparse.Namespace(address=address, http_inference=flag, server_args=server_args)
    assert serve._http_inference(args) is expected


def test_a_listening_socket_is_seen_with_its_holder():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.listen()
        assert ports.in_use("127.0.0.1", port)
        sockets = ports.listening_sockets(port)
        assert sockets and ports.holds(os.getpid(), sockets) and not ports.holds(1, sockets)
        assert f"pid {os.getpid()} (" in ports.holders(port)[0]
    assert ports.listening_sockets(port) == set() and not ports.in_use("127.0.0.1", port)


def test_a_failed_start_is_summed_up_by_its_error_lines_one_line_each(tmp_path):
    server = TritonServer(tmp_path, log_path=tmp_path / "log")
    (tmp_path / "log").write_text(
        'I1201 10:48:48.1 1 server.cc:1] "started"\n'
        'E1201 10:48:48.2 1 cuda.cc:9] "CudaDriverHelper has not been initialized."\n'
        "E1201 10:48:48.3 1 backend_model.cc:692] \"ERROR: Failed: model 'm': no file\\n\\nAt:\\n  model.py(1)\"\n"
        "E1201 10:48:48.3 1 backend_model.cc:692] \"ERROR: Failed: model 'm': no file\\n\\nAt:\\n  model.py(1)\"\n"
        "error: creating server: Internal - failed to load all models\n"
    )
    assert server.failures() == (
        "\n  ERROR: Failed: model 'm': no file\n  error: creating server: Internal - failed to load all models"
    )
    server.close()


def test_serve_help_gives_each_endpoint_and_the_log_level_a_text_and_a_default(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, metavar, default in (
        ("--http-port", "PORT", "(default: 8000)"),
        ("--grpc-port", "PORT", "(default: 8001)"),
        ("--metrics-port", "PORT", "(default: 8002)"),
        ("--log-verbose", "LEVEL", "(default: 0, off)"),
    ):
        entry = text.rsplit(f" {flag} {metavar} ", 1)[1].split(" --", 1)[0]  # the option's own entry
        assert entry.endswith(default) and len(entry) > len(default) + 20, (flag, entry)
