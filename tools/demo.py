"""The main job, end to end, on a machine without an NPU:

1. build a demo ONNX image classifier and its labels file;
2. compile it into an .om with batch gears 1,2,4,8 — with ATC on an Ascend host (the command is
   printed), here with `ge-triton sim-compile` into a simulated .om;
3. generate its Triton model folder from the classification template (engine acl-sim, the
   instances generate writes for an .om, one stream each) and check the repository;
4. serve it with a real tritonserver and classify an image over gRPC and HTTP;
5. check the answer against ONNX Runtime called directly on the same image.

    .venv/bin/python tools/demo.py [--workdir out/demo]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from ge_python_backend.cli import main as ge_triton
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.testing import models

SIZE, CLASSES, TOP = 224, 1000, 5
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def run(step: str, *command: str) -> None:
    print(f"{step} ge-triton {' '.join(command)}", flush=True)
    if ge_triton(list(command)) != 0:
        raise SystemExit(f"ge-triton {command[0]} failed")


def classify(client_module, address: str, image: np.ndarray) -> tuple[list[str], np.ndarray]:
    client = client_module.InferenceServerClient(address)
    tensor = client_module.InferInput("IMAGE", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[image.tobytes()]], dtype=np.object_))
    result = client.infer("classifier", [tensor])
    labels = [label.decode() for label in result.as_numpy("LABELS")[0]]
    return labels, result.as_numpy("SCORES")[0]


def reference(onnx_file: Path, image: np.ndarray, labels: list[str]) -> tuple[list[str], np.ndarray]:
    """The same classification computed here, independently, with ONNX Runtime."""
    pixels = ((image.astype(np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)[None]
    (logits,) = ort.InferenceSession(str(onnx_file)).run(None, {"image": pixels})
    best = np.argsort(-logits[0], kind="stable")[:TOP]
    return [labels[i] for i in best], logits[0][best]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/demo"))
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    onnx_file = models.image_classifier(workdir / "classifier.onnx", size=SIZE, classes=CLASSES)
    labels = [f"class-{index:04d}" for index in range(CLASSES)]
    (workdir / "labels.txt").write_text("\n".join(labels) + "\n", encoding="utf-8")
    print(f"1. built {onnx_file} (FP32 [batch,3,{SIZE},{SIZE}] -> {CLASSES} logits) and labels.txt")

    print("2. on an Ascend host, compile it with this ATC command:", flush=True)
    ge_triton(["atc-cmd", str(onnx_file), "--soc-version", "Ascend310P3", "--batch-gears", "1,2,4,8"])
    om_file = workdir / "classifier.om"
    run("   here, without an NPU:", "sim-compile", str(onnx_file), "--batch-gears", "1,2,4,8", "-o", str(om_file))

    repo = workdir / "model_repository"
    run(
        "3.",
        "generate",
        str(om_file),
        "-o",
        str(repo),
        "--name",
        "classifier",
        "--template",
        "classification",
        "--set",
        f"labels={workdir / 'labels.txt'}",
        "--force",
    )
    run("  ", "check", str(repo))

    print("4. starting tritonserver ...", flush=True)
    image = np.random.default_rng(0).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    with TritonServer(repo) as server:
        print(f"   ready: HTTP {server.http_address}, gRPC {server.grpc_address}, metrics {server.metrics_url}")
        served = {
            "gRPC": classify(grpcclient, server.grpc_address, image),
            "HTTP": classify(httpclient, server.http_address, image),
        }
    print("   stopped tritonserver")

    want_labels, want_scores = reference(onnx_file, image, labels)
    print(f"5. answer for a random {SIZE}x{SIZE} RGB image (raw bytes in, top-{TOP} labels out):")
    ok = True
    for protocol, (got_labels, got_scores) in served.items():
        error = float(np.abs(got_scores - want_scores).max())
        ok &= got_labels == want_labels and error <= 1e-4
        pairs = ", ".join(f"{label} {score:.4f}" for label, score in zip(got_labels, got_scores))
        print(f"   {protocol}: {pairs}  (max |score - onnxruntime| = {error:.1e})")
    if not ok:
        print(f"FAILED: ONNX Runtime says {want_labels} {want_scores}", file=sys.stderr)
        return 1
    print("OK: the served labels and scores equal ONNX Runtime's on the same image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
