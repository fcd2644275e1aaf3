"""``ge-triton sim-compile MODEL.onnx -o MODEL.om [ATC flags]``: build a simulated .om for engine acl-sim.

Takes ATC's own flags and spellings, so an ATC command becomes a sim-compile command by swapping
the program name and ``--model``/``--output``: ``--input_shape "x:-1,3,224,224;y:1~8,4"``,
``--input_format NCHW|NHWC|ND``, ``--dynamic_batch_size 1,2,4,8``, ``--dynamic_image_size
"224,224;448,448"``, ``--dynamic_dims "1,20;2,40"`` (the -1 values in --input_shape order) and
``--insert_op_conf aipp.cfg`` (ATC's aipp_op syntax). The dashed spellings (``--input-shape``,
``--batch-gears``, ...) work too. ``--framework`` must be 5 (ONNX); ``--soc_version`` is recorded, and
``--aicore_num N|M`` (the simulated device runs the model on N of its AI Cores);
ATC's tuning flags (precision, logging, fusion) change nothing a simulation computes and are
accepted and ignored, said on stderr. Every gear is run once on ONNX Runtime before the file is written.
"""

from __future__ import annotations

import argparse
import sys

from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import format_shape

#: ATC flags that tune the compiled kernels or ATC's own logging: nothing the simulator models
IGNORED_ATC_FLAGS = (
    "log",
    "precision_mode",
    "precision_mode_v2",
    "op_select_implmode",
    "optypelist_for_implmode",
    "fusion_switch_file",
    "enable_small_channel",
    "buffer_optimize",
    "compression_optimize_conf",
    "modify_mixlist",
    "keep_dtype",
    "op_debug_level",
    "host_env_os",
    "host_env_cpu",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the ONNX model to compile (or --model)")
    parser.add_argument("--model", dest="model_option", metavar="MODEL.onnx", help="ATC's spelling of MODEL.onnx")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.om", help="the simulated .om to write")
    parser.add_argument(
        "--dynamic_batch_size",
        "--batch-gears",
        dest="batch_gears",
        default="",
        metavar="B1,B2,...",
        help="dynamic batch sizes, e.g. 1,2,4,8",
    )
    parser.add_argument(
        "--input_shape",
        "--input-shape",
        dest="input_shape",
        default="",
        metavar="NAME:D0,D1,...;...",
        help="input shapes: -1 on the axes of gears, a~b or -1 (0~) for shape ranges, e.g. x:-1,3,224,224",
    )
    parser.add_argument(
        "--dynamic_image_size",
        "--dynamic-image-size",
        dest="dynamic_image_size",
        default="",
        metavar="H,W;H,W",
        help="image size gears, e.g. 224,224;448,448",
    )
    parser.add_argument(
        "--dynamic_dims",
        "--dynamic-dims",
        dest="dynamic_dims",
        default="",
        metavar="D,D;D,D",
        help="dims gears: the -1 values of --input_shape in its order, gears separated by ';'",
    )
    parser.add_argument(
        "--input_format",
        "--input-format",
        dest="input_format",
        default=None,
        metavar="FORMAT",
        help="layout of the 4-D inputs: NCHW (default), NHWC or ND",
    )
    parser.add_argument(
        "--insert_op_conf",
        "--insert-op-conf",
        dest="insert_op_conf",
        default=None,
        metavar="AIPP.cfg",
        help="an AIPP config in ATC's aipp_op syntax (static or dynamic AIPP)",
    )
    parser.add_argument("--framework", default="5", metavar="N", help="ATC's source framework: 5 (ONNX) only")
    parser.add_argument(
        "--soc_version",
        "--soc-version",
        dest="soc_version",
        default="",
        metavar="SOC",
        help="the SoC ATC would compile for (recorded in the file)",
    )
    parser.add_argument(
        "--aicore_num",
        "--aicore-num",
        dest="aicore_num",
        default="",
        metavar="N|M",
        help="AI (Cube) and Vector cores per operator: the simulated device runs the model on N of its cores",
    )
    for flag in IGNORED_ATC_FLAGS:
        parser.add_argument(f"--{flag}", dest=f"ignored_{flag}", default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    from ge_python_backend.sim.compile import sim_compile

    model = _model_path(args)
    ignored = [f"--{flag}" for flag in IGNORED_ATC_FLAGS if getattr(args, f"ignored_{flag}") is not None]
    if ignored:
        print(
            f"sim-compile: ignoring {', '.join(ignored)} (they tune real kernels; the simulation runs ONNX Runtime)",
            file=sys.stderr,
        )
    spec = sim_compile(
        model,
        args.output,
        batch_gears=args.batch_gears,
        input_shapes=args.input_shape or None,
        dynamic_image_size=args.dynamic_image_size,
        dynamic_dims=args.dynamic_dims,
        input_format=args.input_format,
        insert_op_conf=args.insert_op_conf,
        soc_version=args.soc_version,
        aicore_num=args.aicore_num,
    )
    print(f"wrote {args.output} (simulated .om for engine acl-sim)")
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for tensor in tensors:
            line = f"  {kind:6} {tensor.name}: {tensor.dtype} {format_shape(tensor.shape)} {tensor.format}".rstrip()
            if tensor.ranges:
                line += " ranges " + ",".join(f"{lo}~{hi if hi >= 0 else ''}" for lo, hi in tensor.ranges)
            if tensor.preprocessing is not None:
                line += f"; {tensor.preprocessing.describe()}"
            print(line)
    if spec.batch.kind == "gears":
        print(f"  batch gears: {', '.join(map(str, spec.batch.sizes))}")
    for gear in spec.shape_gears:
        print(
            f"  {spec.gear_kind} gear {gear.label}: "
            + ", ".join(f"{n} {format_shape(s)}" for n, s in gear.shapes.items())
        )
    return 0


def _model_path(args: argparse.Namespace) -> str:
    if args.framework != "5":
        raise ConfigError(f"--framework={args.framework}: sim-compile reads ONNX models only (ATC's --framework=5)")
    given = [m for m in (args.model, args.model_option) if m]
    if len(given) != 1:
        raise ConfigError("give the ONNX model once: as MODEL.onnx or as --model=MODEL.onnx")
    return given[0]
