"""ATC's option syntax, read the same way by sim-compile, atc-cmd and the acl engine's parameters.

``--input_shape`` is ``NAME:D0,D1,...;NAME:...`` with each axis a size, ``-1`` (an axis of gears,
or of a shape range without bounds) or ``low~high`` / ``low~`` (a shape range); gear lists are
``V,V,...;V,V,...`` (ATC's --input_shape.md, --dynamic_dims.md, --dynamic_image_size.md).
"""

from __future__ import annotations

import shlex

from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import UNBOUNDED

#: one axis: a size, -1, or (low, high) with high UNBOUNDED for "low~"
Dim = int | tuple[int, int]


def parse_input_shape(
    text: str, flag: str = "--input_shape", *, ranges_refused: str = ""
) -> dict[str, tuple[Dim, ...]]:
    """``"x:-1,3,224,224;y:1~8,4"`` -> {"x": (-1, 3, 224, 224), "y": ((1, 8), 4)}, in the given order.
    ``ranges_refused``: why ``a~b`` is not accepted here (empty: it is)."""
    shapes: dict[str, tuple[Dim, ...]] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise ConfigError(f"{flag} item {part!r} is not NAME:D0,D1,... (e.g. x:-1,3,224,224)")
        if name in shapes:
            raise ConfigError(f"{flag} names input {name!r} twice")
        if ranges_refused and "~" in dims:
            raise ConfigError(f"{flag} of {name!r}: {dims!r} is a shape range; {ranges_refused}")
        shapes[name] = tuple(_dim(d.strip(), name, flag) for d in dims.split(",")) if dims.strip() else ()
    return shapes


def axis_range(dim: Dim) -> tuple[int, int]:
    """An --input_shape axis as (min, max): -1 is 0~ (ATC's SHAPE_RANGE_LOWER_LIMIT 0,
    hicann/ge compiler/api/aclgrph/option_utils.cc:230-272), a size d is d~d."""
    if isinstance(dim, tuple):
        return dim
    return (0, UNBOUNDED) if dim == -1 else (dim, dim)


def _dim(text: str, name: str, flag: str) -> Dim:
    try:
        if "~" in text:
            low, _, high = text.partition("~")
            bounds = (int(low), int(high) if high else UNBOUNDED)
            if bounds[0] < 0 or (bounds[1] != UNBOUNDED and bounds[1] < bounds[0]):
                raise ValueError
            return bounds
        value = int(text)
        if value < -1 or value == 0:
            raise ValueError
        return value
    except ValueError:
        raise ConfigError(
            f"{flag} of {name!r}: {text!r} is not a size >= 1, -1 or a range low~high (e.g. 1~8)"
        ) from None


def parse_sizes(text: str, flag: str) -> dict[str, tuple[int, ...]]:
    """``"x:8,3,512,512;y:8,1000"``: the --input_shape syntax with sizes only (no -1, no ranges)."""
    shapes = parse_input_shape(text, flag, ranges_refused="give the largest size of each axis")
    for name, dims in shapes.items():
        if any(d == -1 for d in dims):
            raise ConfigError(f"{flag} of {name!r}: every axis needs a size, got -1")
    return {name: tuple(int(d) for d in dims if isinstance(d, int)) for name, dims in shapes.items()}


def format_dims(dims: tuple[Dim, ...]) -> str:
    """Dims back in --input_shape's spelling."""
    return ",".join(f"{d[0]}~{'' if d[1] == UNBOUNDED else d[1]}" if isinstance(d, tuple) else str(d) for d in dims)


def parse_int_list(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4) ("" -> ()); ConfigError naming ``flag`` otherwise."""
    if not text.strip():
        return ()
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a comma-separated list of integers") from None


def parse_gear_list(text: str, flag: str) -> tuple[tuple[int, ...], ...]:
    """``"224,224;448,448"`` -> ((224, 224), (448, 448))."""
    return tuple(parse_int_list(part.strip(), flag) for part in text.split(";") if part.strip())


#: Every flag ATC defines (hicann/ge api/atc/atc_flags.cc:13-282, one DEFINE_* each, and the
#: optimization options it registers at start); ATC refuses any other with "ERROR: unknown command
#: line flag" (api/atc/cmd_flag_info.cc:484-486).
ATC_FLAGS = frozenset(
    [
        "model",
        "output",
        "framework",
        "weight",
        "input_shape",
        "input_hint_shape",
        "input_shape_range",
        "help",
        "cal_conf",
        "insert_op_conf",
        "op_name_map",
        "target",
        "om",
        "json",
        "mode",
        "out_nodes",
        "op_precision_mode",
        "allow_hf32",
        "precision_mode",
        "precision_mode_v2",
        "modify_mixlist",
        "keep_dtype",
        "input_format",
        "check_report",
        "input_fp16_nodes",
        "is_output_adjust_hw_layout",
        "is_input_adjust_hw_layout",
        "output_type",
        "op_select_implmode",
        "optypelist_for_implmode",
        "singleop",
        "disable_reuse_memory",
        "auto_tune_mode",
        "jit_compile",
        "optimization_switch",
        "static_model_ops_lower_limit",
        "h2d_overlapped_with_compute",
        "raw_ge_options",
        "raw_ge_options_ignore_unsupported",
        "soc_version",
        "virtual_type",
        "core_type",
        "aicore_num",
        "buffer_optimize",
        "fusion_switch_file",
        "compression_optimize_conf",
        "customize_dtypes",
        "op_debug_config",
        "save_original_model",
        "dynamic_batch_size",
        "dynamic_image_size",
        "dynamic_dims",
        "enable_small_channel",
        "enable_compress_weight",
        "enable_attr_compression",
        "compress_weight_conf",
        "sparsity",
        "enable_single_stream",
        "ac_parallel_enable",
        "tiling_schedule_optimize",
        "log",
        "dump_mode",
        "op_debug_level",
        "enable_scope_fusion_passes",
        "debug_dir",
        "status_check",
        "op_compiler_cache_dir",
        "op_compiler_cache_mode",
        "mdl_bank_path",
        "op_bank_path",
        "display_model_info",
        "device_id",
        "shape_generalized_build_mode",
        "atomic_clean_policy",
        "external_weight",
        "deterministic",
        "deterministic_level",
        "host_env_os",
        "host_env_cpu",
        "cluster_config",
        "hccl_sub_comm_config",
        "quant_dumpable",
        "is_weight_clip",
        "oo_level",
        "build_config",
        # the optimization options ATC registers as flags at start (api/atc/main_impl.cc:1136-1151,
        # those visible to kAtc in base/common/option_register.cc:40-95)
        "oo_constant_folding",
        "oo_dead_code_elimination",
        "topo_sorting_mode",
        "export_compile_stat",
        "multi_stream_parallel_mode",
    ]
)

#: ATC flags whose value is a file or folder: given relative to the model's version folder, and
#: (for files) part of what a compiled model is cached by
PATH_FLAGS = frozenset(
    [
        "weight",
        "cal_conf",
        "insert_op_conf",
        "op_name_map",
        "op_precision_mode",
        "modify_mixlist",
        "keep_dtype",
        "fusion_switch_file",
        "compression_optimize_conf",
        "customize_dtypes",
        "op_debug_config",
        "compress_weight_conf",
        "raw_ge_options",
        "cluster_config",
        "hccl_sub_comm_config",
        "debug_dir",
        "op_compiler_cache_dir",
        "mdl_bank_path",
        "op_bank_path",
    ]
)

#: GE option names (graph/session options of the online API) -> the ATC flag that sets the same
#: thing when compiling offline, as ATC's own table maps them (hicann/ge api/atc/atc_option_map.cc:
#: 21-97; the option strings from inc/graph_metadef/external/ge_common/ge_common_api_types.h)
GE_OPTION_FLAGS = {
    "ge.exec.precision_mode": "precision_mode",
    "ge.exec.precision_mode_v2": "precision_mode_v2",
    "ge.exec.op_precision_mode": "op_precision_mode",
    "ge.exec.modify_mixlist": "modify_mixlist",
    "ge.exec.allow_hf32": "allow_hf32",
    "ge.aicoreNum": "aicore_num",
    "ge.opSelectImplmode": "op_select_implmode",
    "ge.optypelistForImplmode": "optypelist_for_implmode",
    "ge.inputShape": "input_shape",
    "ge.dynamicDims": "dynamic_dims",
    "ge.insertOpFile": "insert_op_conf",
    "ge.customizeDtypes": "customize_dtypes",
    "ge.fusionSwitchFile": "fusion_switch_file",
    "ge.bufferOptimize": "buffer_optimize",
    "ge.enableSmallChannel": "enable_small_channel",
    "ge.outputDatatype": "output_type",
    "ge.INPUT_NODES_SET_FP16": "input_fp16_nodes",
    "ge.deterministic": "deterministic",
    "ge.opDebugLevel": "op_debug_level",
    "ge.engineType": "core_type",
    "ge.virtual_type": "virtual_type",
    "ge.enableCompressWeight": "enable_compress_weight",
    "ge.oo.level": "oo_level",
}


def split_atc_flags(text: str, where: str) -> tuple[tuple[str, str], ...]:
    """``'--aicore_num=12|10 --log=error'`` -> (("aicore_num", "12|10"), ("log", "error")), shell
    quoting allowed; ConfigError naming ``where`` and the flag for a token that is not
    ``--name=value`` or a name ATC does not define."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} in {text!r}") from None
    flags = []
    for token in tokens:
        name, sep, value = token.removeprefix("--").partition("=")
        if not token.startswith("--") or not sep or not name:
            raise ConfigError(f"{where}: {token!r} is not an ATC flag of the form --name=value")
        if name not in ATC_FLAGS:
            raise ConfigError(f"{where}: --{name} is not an ATC flag (hicann/ge api/atc/atc_flags.cc defines them)")
        flags.append((name, value))
    return tuple(flags)


def parse_aicore_num(text: str, flag: str = "--aicore_num") -> tuple[int, int | None]:
    """``"12|10"`` -> (12, 10), ``"8|"`` -> (8, None): Cube (or AI Core) and Vector cores per
    operator, both > 0 (--aicore_num.md: "整数1|整数2"; the 310P, 310B and 910 take only the first)."""
    cube, sep, vector = text.partition("|")
    try:
        values = (int(cube), int(vector) if vector else None)
    except ValueError:
        values = (0, 0)
    if not sep or values[0] < 1 or (values[1] is not None and values[1] < 1):
        raise ConfigError(
            f"{flag} {text!r}: expected CUBE|VECTOR core counts such as 12|10 (both > 0), or 8| where the SoC "
            "has one kind of AI Core (Atlas inference series, 200I/500 A2, training series)"
        )
    return values
