"""What `serve` and TritonServer take from the command line in force, the port checks, the
error summary of a failed start, and serve's help."""

from __future__ import annotations

import os
import socket

import pytest

from ge_python_backend.cli import build_parser
from ge_python_backend.errors import GEError
from ge_python_backend.ops import ports
from ge_python_backend.ops.access import (
    API_KEY_HEADER,
    HTTP_INFERENCE_OFF_HEADER,
    OPERATOR_APIS,
    Api,
    command_lines_hidden,
    parse_apis,
)
from ge_python_backend.ops.server import (
    LogRecord,
    ServerError,
    TritonInstall,
    TritonServer,
    find_tritonserver,
    log_records,
)
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


def _executable(path):
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_a_tritonserver_on_path_from_a_wheel_tree_gets_the_wheel_libraries(tmp_path, monkeypatch):
    """The Python stub is copied out of the tree, where its relative RPATH no longer finds them."""
    wheel = tmp_path / "wheel"
    binary = _executable(wheel / "pytriton" / "tritonserver" / "bin" / "tritonserver")
    (wheel / "nvidia_pytriton.libs").mkdir()
    monkeypatch.setenv("PATH", str(binary.parent))
    assert find_tritonserver() == TritonInstall(
        binary, wheel / "pytriton" / "tritonserver" / "backends", wheel / "nvidia_pytriton.libs"
    )


@pytest.mark.parametrize("prefix", ["opt/tritonserver", "tritonserver", "pytriton/tritonserver"])
def test_a_tritonserver_on_path_elsewhere_gets_its_own_lib_folder(tmp_path, monkeypatch, prefix):
    binary = _executable(tmp_path / prefix / "bin" / "tritonserver")
    monkeypatch.setenv("PATH", str(binary.parent))
    assert find_tritonserver() == TritonInstall(binary, binary.parents[1] / "backends", binary.parents[1] / "lib")


def _prefixes(server, install):
    return {
        a.split("=", 1)[1].split(",")[0]: a.rsplit("=", 1)[1]
        for a in server.command(install, install.backends)
        if "shm-region-prefix-name" in a
    }


def test_each_server_gives_each_python_based_backend_a_shm_prefix_of_its_own(tmp_path):
    """Before Triton 24.04 the regions are numbered from 1 per server: two servers would share them."""
    install = TritonInstall(tmp_path / "bin" / "tritonserver", tmp_path / "backends", None)
    (tmp_path / "backends").mkdir()
    first, second = TritonServer(tmp_path), TritonServer(tmp_path)
    ours = _prefixes(first, install)
    assert sorted(ours) == ["ge", "npu_ge", "python"]
    assert len(set(ours.values()) | set(_prefixes(second, install).values())) == 6
    (tmp_path / "backends" / "npu_ge").mkdir()  # CANN's own C++ backend: its configuration is its own
    assert sorted(_prefixes(first, install)) == ["ge", "python"]
    first.close()
    second.close()


#: the same two messages as tritonserver 2.43 (Triton 24.02) and 2.51 (Triton 24.10) write them
LOG_2_43 = """I1206 10:04:46.9 20201 model_lifecycle.cc:835] successfully loaded 'breaker'
+----------+
| breaker  |
E1206 10:04:47.0 20201 logbridge.py:41] [breaker_0_0] request 'r': preprocess returned list
  the hook: File "/m/model.py", line 37
"""
LOG_2_51 = """I1206 10:04:46.9 20201 model_lifecycle.cc:839] "successfully loaded 'breaker'"
I1206 10:04:46.9 20201 server.cc:604] \n+----------+
| breaker  |
E1206 10:04:47.0 20201 logbridge.py:41] "[breaker_0_0] request 'r': preprocess returned list\\n  the hook: \
File \\"/m/model.py\\", line 37"
"""


@pytest.mark.parametrize("text", [LOG_2_43, LOG_2_51], ids=["2.43", "2.51"])
def test_log_records_read_both_log_formats_alike(text):
    records = [r for r in log_records(text) if r.message.strip()]
    assert [r.message for r in records] == [
        "successfully loaded 'breaker'",
        "[breaker_0_0] request 'r': preprocess returned list\n  the hook: File \"/m/model.py\", line 37",
    ]
    assert records[1] == LogRecord("E", "logbridge.py:41", records[1].message)


def test_the_free_ports_a_server_takes_are_distinct(tmp_path, monkeypatch):
    offered = iter([5000, 5000, 5001, 5000, 5002])
    monkeypatch.setattr("ge_python_backend.ops.server.free_port", lambda host="": next(offered))
    server = TritonServer(tmp_path)
    assert (server.http_port, server.grpc_port, server.metrics_port) == (5000, 5001, 5002)
    server.close()


def test_without_http_there_is_nothing_to_check_readiness_with(tmp_path):
    with pytest.raises(ServerError, match="--allow-http=false: the server's readiness is checked over HTTP"):
        TritonServer(tmp_path, extra_args=["--allow-http=false"])


def test_load_model_needs_explicit_model_control_in_force_and_a_refusal_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    with pytest.raises(ServerError, match="--load-model a: models are loaded by name only in model control mode"):
        TritonServer(tmp_path, load_models=["a"])
    with pytest.raises(ServerError, match=r"\(in force: poll,"):
        TritonServer(
            tmp_path, model_control_mode="explicit", load_models=["a"], extra_args=["--model-control-mode=poll"]
        )
    assert list((tmp_path / "tmp").iterdir()) == []
    server = TritonServer(tmp_path, load_models=["a", "*"], extra_args=["--model-control-mode=explicit"])
    command = server.command(TritonInstall(tmp_path / "tritonserver", tmp_path, None), tmp_path)
    assert "--load-model=a" in command and "--load-model=*" in command
    server.close()


def test_a_restart_with_chosen_models_loads_those_alone_whatever_the_extra_arguments_say(tmp_path):
    install = TritonInstall(tmp_path / "tritonserver", tmp_path, None)
    extra = ["--load-model", "b", "--log-info=true", "--load-model=c", "--exit-timeout-secs=3"]
    server = TritonServer(tmp_path, model_control_mode="explicit", load_models=["*"], extra_args=extra)
    command = server.command(install, tmp_path, load_models=["m"])
    assert [a for a in command if "load-model" in a] == ["--load-model=m"]
    assert "--log-info=true" in command and "--exit-timeout-secs=3" in command  # the other extra arguments stay
    assert [a for a in server.command(install, tmp_path) if "load-model" in a or a in "bc"] == [
        "--load-model=*",
        "--load-model",
        "b",
        "--load-model=c",
    ]
    server.close()
    server = TritonServer(tmp_path)
    with pytest.raises(ServerError, match="a restart with chosen models needs model control mode explicit, not none"):
        server.restart(["m"])
    server.close()


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
        ("0.0.0.0", True, [], True),
        ("127.0.0.1", False, [], False),
        # the address in force decides, not --address alone
        ("127.0.0.1", None, ["--http-address=0.0.0.0"], False),
        ("127.0.0.1", None, ["--http-address", "::"], False),
        ("0.0.0.0", None, ["--http-address=127.0.0.1"], True),
        ("127.0.0.1", None, ["--grpc-address=0.0.0.0"], True),
    ],
)
def test_http_inference_is_on_by_default_only_where_http_listens_on_loopback(
    tmp_path, address, flag, server_args, expected
):
    ports = {"http_port": 8000, "grpc_port": 8001, "metrics_port": 8002}  # no free_port on an IPv6 address
    server = TritonServer(tmp_path, address=address, http_inference=flag, extra_args=server_args, **ports)
    command = server.command(TritonInstall(tmp_path / "tritonserver", tmp_path, None), tmp_path)
    assert server.http_inference is expected
    assert any(a.startswith(f"--http-restricted-api=inference:{HTTP_INFERENCE_OFF_HEADER}=") for a in command) is (
        not expected
    )
    server.close()


def test_restricted_apis_need_the_operator_key_on_both_protocols(tmp_path):
    server = TritonServer(tmp_path, restricted_apis=OPERATOR_APIS, api_key="k" * 16)
    command = server.command(TritonInstall(tmp_path / "tritonserver", tmp_path, None), tmp_path)
    groups = ",".join(OPERATOR_APIS)
    assert f"--http-restricted-api={groups}:{API_KEY_HEADER}={'k' * 16}" in command
    assert f"--grpc-restricted-protocol={groups}:{API_KEY_HEADER}={'k' * 16}" in command
    assert server.http_headers(Api.MODEL_REPOSITORY) == {API_KEY_HEADER: "k" * 16}  # its own readiness calls
    assert server.http_headers(Api.HEALTH) == {} and server.http_headers(Api.METADATA) == {}
    assert TritonServer(tmp_path, restricted_apis=OPERATOR_APIS).api_key != server.api_key  # random per server
    server.close()


def test_a_group_the_extra_arguments_restrict_is_left_to_them(tmp_path):
    """tritonserver refuses a group named in two restrictions; the server's own calls use the user's header."""
    server = TritonServer(
        tmp_path, restricted_apis=OPERATOR_APIS, extra_args=["--http-restricted-api=model-repository,inference:mine=v"]
    )
    command = server.command(TritonInstall(tmp_path / "tritonserver", tmp_path, None), tmp_path)
    (ours,) = [a for a in command if a.startswith("--http-restricted-api=") and "mine" not in a]
    assert ours.startswith("--http-restricted-api=model-config,shared-memory,trace,logging:")
    assert any(a.startswith("--grpc-restricted-protocol=model-repository,model-config,") for a in command)
    assert server.http_headers(Api.MODEL_REPOSITORY) == {"mine": "v"}
    server.close()


def test_restricted_api_groups_are_parsed_and_an_unknown_one_is_named():
    assert parse_apis("none") == ()
    assert parse_apis("model-config, trace,model-config") == (Api.MODEL_CONFIG, Api.TRACE)
    with pytest.raises(GEError, match="'model-configs' is not a tritonserver API group"):
        parse_apis("model-configs")


def test_hidden_command_lines_are_read_from_the_proc_mount(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw,nosuid,relatime 0 0\n")
    assert not command_lines_hidden(mounts)
    mounts.write_text("proc /proc proc rw,nosuid,relatime,hidepid=invisible 0 0\n")
    assert command_lines_hidden(mounts)


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
