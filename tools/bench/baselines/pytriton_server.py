"""A PyTriton server for the serving scenario's baseline: an ONNX Runtime session behind PyTriton's
``@batch`` decorator, with the same batching settings as the GEModel folder it is compared to.

    python tools/bench/baselines/pytriton_server.py MODEL.onnx --name pytriton \
        --http-port P --grpc-port P --metrics-port P

Serves on loopback until SIGINT/SIGTERM. Prints "ready" on stdout once the model answers.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("onnx")
    parser.add_argument("--name", default="pytriton")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-queue-delay-us", type=int, default=500)
    args = parser.parse_args()

    session = ort.InferenceSession(args.onnx, providers=["CPUExecutionProvider"])
    (model_input,), (model_output,) = session.get_inputs(), session.get_outputs()

    @batch
    def infer(**inputs):
        return {model_output.name: session.run([model_output.name], {model_input.name: inputs[model_input.name]})[0]}

    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        metrics_address="127.0.0.1",
        metrics_port=args.metrics_port,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=infer,
            inputs=[Tensor(name=model_input.name, dtype=np.float32, shape=tuple(model_input.shape[1:]))],
            outputs=[Tensor(name=model_output.name, dtype=np.float32, shape=tuple(model_output.shape[1:]))],
            config=ModelConfig(
                max_batch_size=args.max_batch_size,
                batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us),
            ),
            strict=False,
        )
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        triton.run()
        print("ready", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
