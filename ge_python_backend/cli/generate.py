"""ge-triton generate: write a Triton model folder for an .om, simulated .om or .onnx file."""

from __future__ import annotations

import argparse
from pathlib import Path

from ge_python_backend.cli.arguments import device_list, int_list, setting, state_pair, tensor_shape
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.generate import (
    DEFAULT_MAX_QUEUE_SIZE,
    DEFAULT_NPU_INSTANCES,
    DEFAULT_QUEUE_TIMEOUT_US,
    GenerateOptions,
    generate,
)
from ge_python_backend.repository.templates import available_templates, load_template


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        type=Path,
        nargs="?",
        help="model file: CANN .om, simulated .om or .onnx (none for --template router: its members are models "
        "of the repository)",
    )
    parser.add_argument("-o", "--output", type=Path, default=Path("model_repository"), help="model repository folder")
    parser.add_argument("-n", "--name", help="model name (default: the file name without its suffix)")
    parser.add_argument("-t", "--template", default="generic", help="template (see --list-templates)")
    parser.add_argument(
        "--set",
        dest="template_options",
        type=setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="template option, e.g. --set labels=labels.txt",
    )
    parser.add_argument(
        "--backend",
        choices=("python", "ge"),
        default="python",
        help='"ge": config only, served by the installed ge backend (no model.py)',
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "onnxruntime", "acl", "acl-sim"),
        help="engine parameter (default: the one the model file needs)",
    )
    parser.add_argument("--version", type=int, default=1, help="version folder number")
    parser.add_argument("--max-batch-size", type=int, help="override the largest batch the model implies")
    parser.add_argument("--preferred-batch-sizes", type=int_list, help="override dynamic_batching preferred sizes")
    parser.add_argument("--max-queue-delay-us", type=int, default=500, help="dynamic batching queue delay")
    parser.add_argument(
        "--instances",
        type=int,
        help=f"instance_group count (KIND_CPU; default {DEFAULT_NPU_INSTANCES} for NPU engines: one batch on the "
        "device while the other instance does its host work; more only queue on one device; else 1)",
    )
    parser.add_argument("--device-ids", type=device_list, default=(0,), help="NPU ids, instances spread round-robin")
    parser.add_argument(
        "--streams",
        type=int,
        default=1,
        help="execution slots per instance (answers are returned from execute, so the slots share one execute's "
        "batches; use --instances for overlap)",
    )
    parser.add_argument("--warmup", action="store_true", help="add a zero-data model_warmup entry")
    parser.add_argument(
        "--max-queue-size",
        type=int,
        default=DEFAULT_MAX_QUEUE_SIZE,
        help="queue policy: requests beyond this many waiting are refused at once (default 0: "
        "no policy; note that tritonserver 2.51 stalls ~0.5 s at times with any queue policy)",
    )
    parser.add_argument(
        "--queue-timeout-ms",
        type=float,
        default=DEFAULT_QUEUE_TIMEOUT_US / 1000,
        help="queue policy: a request waiting longer is refused (default 0: no timeout)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing model folder")
    parser.add_argument(
        "--add-version",
        action="store_true",
        help="add version --version to an existing model folder (same inputs and outputs)",
    )
    parser.add_argument("--version-policy", help="latest:N, all or specific:1,3 (which versions Triton serves)")
    sequence = parser.add_argument_group("stateful models (Triton's sequence batcher)")
    sequence.add_argument(
        "--sequence", action="store_true", help="sequence_batching with START/END/READY/CORRID control inputs"
    )
    sequence.add_argument("--sequence-strategy", choices=("direct", "oldest"), default="direct")
    sequence.add_argument(
        "--sequence-idle-ms",
        type=float,
        default=5000.0,
        help="max_sequence_idle_microseconds, in ms; GEModel drops idle state after it too",
    )
    sequence.add_argument(
        "--state",
        dest="states",
        type=state_pair,
        action="append",
        default=[],
        metavar="INPUT=OUTPUT",
        help="model input fed from the previous step's output",
    )
    sequence.add_argument(
        "--state-batch-axis",
        type=int,
        default=0,
        help="batch axis of the state tensors (1 for [layers, batch, hidden])",
    )
    parser.add_argument(
        "--unbatched-inputs",
        type=lambda t: tuple(n.strip() for n in t.split(",")),
        default=(),
        help="model inputs without a batch axis (one value per request)",
    )
    parser.add_argument(
        "--shape",
        dest="shapes",
        type=tensor_shape,
        action="append",
        default=[],
        metavar="NAME:D0,D1,...",
        help="dims for a tensor the model file leaves open: a rank where it has none, sizes for -1 axes "
        "(full shape, batch axis included; repeatable)",
    )
    parser.add_argument(
        "--max-shapes",
        default="",
        metavar="NAME:D0,D1,...;...",
        help="largest shapes of the tensors of a shape-range .om without an upper bound (parameter acl_max_shapes); "
        "tensors unbounded only on the batch axis get max_batch_size there without it",
    )
    parser.add_argument(
        "--providers",
        default="",
        metavar="NAME,NAME,...",
        help="engine onnxruntime: its execution providers in priority order (parameter onnxruntime_providers), "
        "e.g. CUDAExecutionProvider,CPUExecutionProvider; a GPU provider (CUDA, TensorRT, ROCm) makes the "
        "instances KIND_GPU, each on the GPU Triton places it on",
    )
    parser.add_argument("--list-templates", action="store_true", help="list templates and exit")


def run(args: argparse.Namespace) -> int:
    if args.list_templates:
        for name in sorted(available_templates()):
            print(f"{name:16} {load_template(name).description}")
        return 0
    if args.name is None and args.model is None:
        raise ConfigError("give a model file (or --list-templates); a template without one needs --name")
    options = GenerateOptions(
        name=args.model.stem if args.name is None else args.name,
        template=args.template,
        backend=args.backend,
        version=args.version,
        engine=args.engine,
        max_batch_size=args.max_batch_size,
        preferred_batch_sizes=args.preferred_batch_sizes,
        max_queue_delay_us=args.max_queue_delay_us,
        instance_count=args.instances,
        device_ids=args.device_ids,
        streams=args.streams,
        warmup=args.warmup,
        template_options=dict(args.template_options),
        overwrite=args.force,
        add_version=args.add_version,
        version_policy=args.version_policy,
        max_queue_size=args.max_queue_size,
        queue_timeout_us=int(args.queue_timeout_ms * 1000),
        sequence=args.sequence,
        sequence_strategy=args.sequence_strategy,
        sequence_idle_us=int(args.sequence_idle_ms * 1000),
        states=tuple(args.states),
        state_batch_axis=args.state_batch_axis,
        unbatched_inputs=args.unbatched_inputs,
        shapes=dict(args.shapes),
        max_shapes=args.max_shapes,
        providers=args.providers,
    )
    result = generate(args.model, args.output, options)
    for folder in result.folders or (result.model_dir,):
        print(f"wrote {folder}")
        for path in result.files:
            if path.is_relative_to(folder):
                print(f"  {path.relative_to(folder)}")
    for note in result.notes:
        print(f"note: {note}")
    return 0
