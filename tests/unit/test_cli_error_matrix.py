"""Every ge-triton verb, given unreadable, truncated or corrupt files, missing paths or bad flags:
a clear message on stderr and a non-zero exit code, never a traceback.

Errors the verbs raise themselves are one line, ``ge-triton VERB: error: ...``, exit 2; flags
argparse refuses end with argparse's usage and one error line, exit 2; ``check`` reports the
problems it finds in a repository and exits 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from ge_python_backend.cli import VERBS, main
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.support.om_builder import Model, Tensor, standard_om


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Good, truncated and corrupt files of every kind the verbs read; name -> path."""
    folder = tmp_path_factory.mktemp("cli_inputs")
    onnx = models.linear(folder / "linear.onnx")
    om = standard_om(
        Model(inputs=[Tensor("x", "DT_FLOAT", (1, 4), "ND")], outputs=[Tensor("y", "DT_FLOAT", (1, 4), "ND")])
    )
    sim_compile(onnx, folder / "sim.om", batch_gears=(1, 2))
    np.savez(folder / "request.npz", x=np.ones((2, 4), np.float32))
    contents = {
        "truncated.onnx": onnx.read_bytes()[:60],
        "corrupt.onnx": b"\xff\x00not protobuf" * 20,
        "truncated.om": om[:-10],
        "corrupt.om": b"IMOD" + b"\xff" * 500,
        "empty.om": b"",
        "truncated_sim.om": (folder / "sim.om").read_bytes()[:100],
        "truncated.npz": (folder / "request.npz").read_bytes()[:100],
        "corrupt.npz": b"not a zip file",
        "plain_file": b"text",
        "repo/bad/config.pbtxt": b"\xff\xfe not a config {",
        "repo_truncated/linear/config.pbtxt": b'name: "linear"\nbackend: "python"\nmax_batch_size: 8\n'
        b'parameters { key: "engine" value { string_value: "onnxruntime" } }\n',
        "repo_truncated/linear/1/model.onnx": onnx.read_bytes()[:60],
    }
    for name, data in contents.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    paths = {path.relative_to(folder).as_posix().replace("/", "_"): path for path in folder.rglob("*")}
    paths.update(
        folder=folder,
        missing=folder / "missing",
        missing_om=folder / "missing.om",
        missing_onnx=folder / "missing.onnx",
        out=folder / "out",
    )
    return {name.replace(".", "_"): str(path) for name, path in paths.items()}


# (argv with {placeholders}, exit code, fragment of the message)
CASES = [
    ("inspect {missing_om}", 2, "missing.om: cannot read the file: No such file or directory"),
    ("inspect {folder}", 2, "cannot read the file: Is a directory"),
    ("inspect {empty_om}", 2, "empty.om: is empty, not a CANN OM"),
    ("inspect {truncated_om}", 2, "truncated.om: header: length says the body after the 256-byte header is"),
    ("inspect {corrupt_om}", 2, "corrupt.om: starts with b'IMOD' but its header size field is 4294967295"),
    ("inspect {linear_onnx}", 2, "looks like an ONNX model (protobuf ModelProto), not a CANN OM"),
    ("generate {missing_onnx} -o {out}", 2, "cannot read model file"),
    ("generate {folder} -o {out}", 2, "Is a directory"),
    ("generate {truncated_onnx} -o {out}", 2, "truncated.onnx: [ONNXRuntimeError] : 7 : INVALID_PROTOBUF"),
    ("generate {corrupt_onnx} -o {out}", 2, "corrupt.onnx: [ONNXRuntimeError] : 7 : INVALID_PROTOBUF"),
    ("generate {truncated_sim_om} -o {out}", 2, "truncated_sim.om: header says"),
    ("generate {empty_om} -o {out}", 2, "empty.om: not a model file ge-triton knows"),
    ("generate {linear_onnx} -o {plain_file}", 2, "plain_file is not a folder"),
    ("generate {linear_onnx} -o {out} --streams 0", 2, "--streams 0: expected an integer >= 1"),
    ("generate {linear_onnx} -o {out} --max-queue-size -1", 2, "--max-queue-size -1: expected an integer >= 0"),
    ("generate {linear_onnx} -o {out} --device-ids x", 2, "argument --device-ids: 'x': expected comma-separated"),
    ("generate {linear_onnx} -o {out} --engine tpu", 2, "argument --engine: invalid choice: 'tpu'"),
    ("generate {linear_onnx} -o {out} --set novalue", 2, "argument --set: 'novalue': expected KEY=VALUE"),
    ("generate {linear_onnx} -o {out} --state h_in", 2, "argument --state: 'h_in': expected INPUT=OUTPUT"),
    ("generate {linear_onnx} -o {out} --bogus", 2, "unrecognized arguments: --bogus"),
    ("check {missing}", 2, "missing is not a folder"),
    ("check {plain_file}", 2, "plain_file is not a folder"),
    ("check {repo}", 1, "bad/config.pbtxt: error: not UTF-8 text"),
    ("check {repo_truncated}", 1, "linear/1/model.onnx: error: ONNX Runtime could not load"),
    ("atc-cmd {missing_onnx} --soc-version Ascend310P3", 2, "cannot read model file"),
    ("atc-cmd {truncated_onnx} --soc-version Ascend310P3", 2, "INVALID_PROTOBUF"),
    ("atc-cmd {corrupt_om} --soc-version Ascend310P3", 2, "corrupt.om"),
    ("atc-cmd {linear_onnx} --soc-version Ascend310P3 --config {missing}", 2, "missing: cannot read"),
    ("atc-cmd {linear_onnx} --soc-version Ascend310P3 --config {repo_bad_config_pbtxt}", 2, "not UTF-8 text"),
    ("atc-cmd {linear_onnx}", 2, "the following arguments are required: --soc-version"),
    ("atc-cmd {linear_onnx} --soc-version A --batch-gears 0", 2, "argument --batch-gears: '0'"),
    ("atc-cmd {linear_onnx} --soc-version A --input-shape x", 2, "--input-shape item 'x' is not NAME:D0,D1,..."),
    ("sim-compile {missing_onnx} -o {out}", 2, "No such file or directory"),
    ("sim-compile {truncated_onnx} -o {out}", 2, "truncated.onnx is not an ONNX model"),
    ("sim-compile {corrupt_onnx} -o {out}", 2, "corrupt.onnx is not an ONNX model"),
    ("sim-compile {linear_onnx} -o {folder} --batch-gears 1,2", 2, "Is a directory"),
    (
        "sim-compile {linear_onnx} -o {out} --batch-gears x",
        2,
        "--dynamic_batch_size: 'x' is not a comma-separated list",
    ),
    ("sim-compile {linear_onnx} -o {out} --input-shape zz", 2, "--input_shape item 'zz' is not NAME:D0,D1,..."),
    ("install-backend --backend-dir {plain_file}", 2, "plain_file is not a folder"),
    ("install-backend --bogus", 2, "unrecognized arguments: --bogus"),
    ("serve {missing}", 2, "model repository"),
    ("serve {plain_file}", 2, "is not a folder"),
    ("serve {folder} --http-port x", 2, "argument --http-port: invalid int value: 'x'"),
    ("bench m --data {missing}", 2, "--data"),
    ("bench m --data {truncated_npz}", 2, "truncated.npz: cannot read it as an .npz"),
    ("bench m --data {corrupt_npz}", 2, "corrupt.npz: cannot read it as an .npz"),
    ("bench m --repository {missing}", 2, "missing is not a folder"),
    ("bench m -u 127.0.0.1:1 --metrics-url none", 2, "cannot read model 'm' from 127.0.0.1:1 (grpc)"),
    ("bench m --batch-size 0", 2, "--batch-size 0: expected an integer >= 1"),
    ("bench m --concurrency 0", 2, "argument --concurrency: '0': expected numbers > 0"),
    ("deploy {missing} -o {out} --image r.example/i:1", 2, "missing is not a folder"),
    ("deploy {repo} -o {out} --image r.example/i:1", 2, "has errors every pod would hit"),
    ("deploy {folder} -o {out}", 2, "the following arguments are required: --image"),
    ("deploy {folder} -o {out} --image r.example/i:1 --replicas 0", 2, "--replicas 0: expected an integer from 1"),
    ("doctor {missing}", 2, "missing is not a folder"),
    ("doctor --device x", 2, "argument --device: invalid int value: 'x'"),
    ("conformance --engine tpu", 2, "argument --engine: invalid choice: 'tpu'"),
    ("conformance --engine acl", 2, "engine 'acl' needs CANN's pyACL"),
]


def test_every_verb_is_in_the_matrix():
    assert {argv.split()[0] for argv, _, _ in CASES} == set(VERBS)


@pytest.mark.parametrize(
    "argv, code, fragment", CASES, ids=[argv.split("{")[0] + argv.split()[-1] for argv, _, _ in CASES]
)
def test_bad_input_gives_a_clear_message_and_an_exit_code(files, capsys, argv, code, fragment):
    args = argv.format(**files).split()
    try:
        exit_code = main(args)
    except SystemExit as exc:  # argparse: usage, then one error line
        exit_code = exc.code
    captured = capsys.readouterr()
    assert exit_code == code, captured
    assert "Traceback" not in captured.err + captured.out
    if code == 1:  # check: the problems it found, each naming its file
        assert fragment in captured.out + captured.err
        return
    last = captured.err.splitlines()[-1]
    assert last.startswith(f"ge-triton {args[0]}: error: ") or last.startswith("ge-triton: error: "), captured.err
    assert fragment in last, last
