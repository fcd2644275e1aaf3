"""The main job, end to end: build a demo ONNX image classifier, generate its Triton model
folder with ge-triton, serve it with a real tritonserver, classify an image over gRPC and HTTP,
check the answer against ONNX Runtime, stop the server.

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
from ge_python_backend.server import TritonServer
from ge_python_backend.testing import models


def classify(client_module, address: str, image: np.ndarray) -> np.ndarray:
    client = client_module.InferenceServerClient(address)
    tensor = client_module.InferInput("image", list(image.shape), "FP32")
    tensor.set_data_from_numpy(image)
    return client.infer("classifier", [tensor]).as_numpy("logits")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/demo"))
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    onnx_file = models.image_classifier(workdir / "classifier.onnx")
    print(f"1. built a demo image classifier: {onnx_file} (FP32 [batch,3,224,224] -> 1000 logits)")

    repo = workdir / "model_repository"
    command = ["generate", str(onnx_file), "-o", str(repo), "--name", "classifier", "--force"]
    print(f"2. ge-triton {' '.join(command)}")
    if ge_triton(command) != 0:
        return 1

    print("3. starting tritonserver ...", flush=True)
    with TritonServer(repo) as server:
        print(f"   ready: HTTP {server.http_address}, gRPC {server.grpc_address}, metrics {server.metrics_url}")
        image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
        served = {
            "gRPC": classify(grpcclient, server.grpc_address, image),
            "HTTP": classify(httpclient, server.http_address, image),
        }
    print("4. stopped tritonserver")

    (reference,) = ort.InferenceSession(str(onnx_file)).run(None, {"image": image})
    top5 = np.argsort(-reference[0])[:5]
    logits = ", ".join(f"{v:.4f}" for v in reference[0][top5])
    print(f"5. answer: top-5 classes {top5.tolist()} with logits {logits}")
    worst = 0.0
    for protocol, logits in served.items():
        error = float(np.abs(logits - reference).max())
        worst = max(worst, error)
        print(f"   {protocol}: top-5 {np.argsort(-logits[0])[:5].tolist()}, max |served - onnxruntime| = {error:.2e}")
    if worst > 1e-5:
        print("FAILED: the served answer differs from ONNX Runtime's", file=sys.stderr)
        return 1
    print("OK: tritonserver answered exactly what ONNX Runtime computes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
