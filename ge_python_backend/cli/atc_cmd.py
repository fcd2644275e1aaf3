"""``ge-triton atc-cmd MODEL.onnx --soc-version SOC [...]``: print the ATC command for an .om that
matches a Triton configuration (ATC itself is not run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ge_python_backend.ascend.atc import (
    INPUT_FORMATS,
    PRECISION_MODE,
    PRECISION_MODE_V2,
    AtcRequest,
    parse_dynamic_dims,
    parse_input_shape,
)
from ge_python_backend.cli.arguments import int_list
from ge_python_backend.repository.atc import atc_command

EPILOG = """The printed command (run it where CANN's atc is installed) uses these ATC flags:
  --model=PATH            the ONNX file to compile
  --framework=5           the source is an ONNX model
  --output=PATH           where the .om goes, without the .om suffix (ATC appends it); default: next
                          to the ONNX file, or REPO/NAME/<latest version>/model with --config
  --soc_version=SOC       the Ascend chip to compile for, e.g. Ascend310P3 (on the target,
                          `npu-smi info` shows the name without the Ascend prefix)
  --input_format=FMT      layout of the inputs: NCHW when every input has rank 4, NCDHW for rank 5,
                          ND otherwise (one value applies to all inputs)
  --input_shape="n:d,..." the shape of every input; -1 on axis 0 marks the batch axis of a
                          dynamic-batch model, every other axis must have a size. With
                          --dynamic-dims: the inputs you name in --input-shape, in your order
                          (static inputs may be named too), -1 on every axis the gears set
  --dynamic_batch_size="1,2,4,8"
                          the batch sizes (gears) compiled into the .om; the served model pads a
                          batch up to the next gear. Emitted for two or more gears: ATC needs at
                          least two, so a single gear becomes a fixed batch size instead
  --dynamic_dims="v,..;v,.."
                          from --dynamic-dims: the dims gears. Each gear gives one value per -1
                          axis of --input_shape, input by input in its order (ATC's rule): for
                          data:1,1,40,-1;label:1,-1;mask:-1,-1 the gear 20,20,1,1 runs data
                          [1,1,40,20], label [1,20], mask [1,1]. 2..100 gears, none twice; not
                          with --dynamic_batch_size or --insert_op_conf (ATC refuses both)
  --insert_op_conf=FILE   from --insert-op-conf: an AIPP config in ATC's aipp_op { ... } syntax,
                          checked against its input first
  --precision_mode_v2=M   for --precision fp16, origin, cube_fp16in_fp32out, mixed_float16,
                          mixed_bfloat16, cube_hif8 or mixed_hif8: the precision ATC compiles
                          operators in. origin keeps the model's own types; fp16 uses float16
                          wherever an operator offers both float16 and float32. The flag of
                          newer CANN toolkits.
  --precision_mode=M      for --precision force_fp16, force_fp32, allow_fp32_to_fp16,
                          must_keep_origin_dtype, allow_mix_precision(_fp16|_bf16) or
                          allow_fp32_to_bf16: the older flag, for toolkits without
                          --precision_mode_v2. ATC refuses the two together. Without --precision
                          neither is emitted and ATC's own default applies.

Gears from --config: its preferred_batch_size values plus max_batch_size, or else the powers of two
below max_batch_size plus max_batch_size (max_batch_size 8 -> 1,2,4,8). Shapes from --config: the
config's dims of the model inputs it declares. --batch-gears or --input-shape that contradict the
config are errors. Notes go to stderr, the command to stdout:
  eval "$(ge-triton atc-cmd model.onnx --soc-version Ascend310P3 --config repo/m/config.pbtxt)"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", type=Path, metavar="MODEL.onnx", help="the ONNX model to compile")
    parser.add_argument("--soc-version", required=True, help="target chip, e.g. Ascend310P3")
    parser.add_argument(
        "--batch-gears", type=int_list, default=(), metavar="B1,B2,...", help="batch sizes to compile, e.g. 1,2,4,8"
    )
    parser.add_argument(
        "--input-shape",
        default="",
        metavar="NAME:D0,D1,...;...",
        help="shapes of inputs with unsized axes, ATC spelling (x:-1,3,224,224;y:-1,4); with --dynamic-dims "
        "the inputs in the order the gears list their -1 values",
    )
    parser.add_argument(
        "--dynamic-dims",
        default="",
        metavar="V,V,...;V,V,...",
        help="dims gears (ATC --dynamic_dims): per gear one value per -1 axis of --input-shape, in its order",
    )
    parser.add_argument(
        "--insert-op-conf", type=Path, metavar="AIPP.cfg", help="an AIPP config for ATC (--insert_op_conf)"
    )
    parser.add_argument(
        "--precision",
        choices=tuple(dict.fromkeys(PRECISION_MODE_V2 + PRECISION_MODE)),
        metavar="MODE",
        help=f"operator precision: {', '.join(PRECISION_MODE_V2)} (or the older --precision_mode values)",
    )
    parser.add_argument("--input-format", choices=INPUT_FORMATS, help="override the input layout")
    parser.add_argument("--output", help="output path for the .om (ATC appends .om)")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="REPO/NAME/config.pbtxt",
        help="derive gears, shapes and the output path from this Triton config",
    )


def run(args: argparse.Namespace) -> int:
    shapes, ranges = parse_input_shape(args.input_shape)
    command = atc_command(
        AtcRequest(
            model=args.model,
            soc_version=args.soc_version,
            output=args.output,
            batch_gears=args.batch_gears,
            input_shapes=shapes,
            shape_ranges=ranges,
            precision=args.precision,
            input_format=args.input_format,
            dynamic_dims=parse_dynamic_dims(args.dynamic_dims),
            insert_op_conf=args.insert_op_conf,
        ),
        config=args.config,
    )
    for note in command.notes:
        print(f"note: {note}", file=sys.stderr)
    print(command.shell())
    return 0
