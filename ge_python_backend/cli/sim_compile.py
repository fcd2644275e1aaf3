"""``ge-triton sim-compile MODEL.onnx -o MODEL.om [gears]``: build a simulated .om for the acl-sim engine.

Takes ATC's spellings: ``--batch-gears 1,2,4,8`` (ATC --dynamic_batch_size),
``--input-shape "x:-1,3,224,224;y:-1,4"``, ``--dynamic-image-size "224,224;448,448"``,
``--dynamic-dims "1,20;2,40"`` (one value per -1 axis, inputs in order) and
``--input-format NCHW|NHWC|ND``. Every gear is run once on ONNX Runtime before the file is written.
"""

from __future__ import annotations

import argparse

from ge_python_backend.specs import format_shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model to compile")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.om", help="the simulated .om to write")
    parser.add_argument("--batch-gears", default="", metavar="B1,B2,...", help="dynamic batch sizes, e.g. 1,2,4,8")
    parser.add_argument(
        "--input-shape",
        default="",
        metavar="NAME:D0,D1,...;...",
        help="input shapes with -1 on the dynamic axes, e.g. x:-1,3,224,224",
    )
    parser.add_argument(
        "--dynamic-image-size", default="", metavar="H,W;H,W", help="image size gears, e.g. 224,224;448,448"
    )
    parser.add_argument(
        "--dynamic-dims",
        default="",
        metavar="D,D;D,D",
        help="dims gears: one value per -1 axis of the inputs, gears separated by ';'",
    )
    parser.add_argument(
        "--input-format", default=None, choices=("NCHW", "NHWC", "ND"), help="layout of the 4-D inputs (default NCHW)"
    )


def run(args: argparse.Namespace) -> int:
    from ge_python_backend.sim.compile import sim_compile

    spec = sim_compile(
        args.model,
        args.output,
        batch_gears=args.batch_gears,
        input_shapes=args.input_shape or None,
        dynamic_image_size=args.dynamic_image_size,
        dynamic_dims=args.dynamic_dims,
        input_format=args.input_format,
    )
    print(f"wrote {args.output} (simulated .om for engine acl-sim)")
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for tensor in tensors:
            print(f"  {kind:6} {tensor.name}: {tensor.dtype} {format_shape(tensor.shape)} {tensor.format}".rstrip())
    if spec.batch.kind == "gears":
        print(f"  batch gears: {', '.join(map(str, spec.batch.sizes))}")
    for gear in spec.shape_gears:
        print(
            f"  {spec.gear_kind} gear {gear.label}: "
            + ", ".join(f"{n} {format_shape(s)}" for n, s in gear.shapes.items())
        )
    return 0
