"""What the acl engine's load refuses in its parameters, found without a device or a pyACL call.

One function per rule, called by the load (``engine.prepare_options``, ``AclEngine``, the slots'
buffer sizing) and by ``ge-triton check`` (``offline_problems``, through the engine registry), so
the two cannot drift:

- ``checked_options``: every parameter as the load reads it (files, acl.json and dump-config keys,
  the combinations CANN refuses), without creating the output folders the load then creates;
- ``aipp_config_problem``: each block of ``aipp_config`` names a dynamic-AIPP image;
- ``max_shapes_problems`` (names and ranks of ``acl_max_shapes``) and ``unbounded_problems`` (what
  needs one); ``generated_parameters`` writes it for ``generate`` where the batch axis is the only
  open one. At load the runtime's own sizes decide (``get_*_size_by_index`` is 0 for a tensor
  without an upper bound, model_om2.cpp 426-458); offline they are inferred from the model file's
  shape ranges (a sim-OM records them; the reader of real .om files does not, so there only the
  load can tell).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.acljson import AclJson, ignored_keys, problems, read_acl_json
from ge_python_backend.ascend.aipp import AippConfig
from ge_python_backend.ascend.layout import Shape
from ge_python_backend.engines.acl.options import AclOptions, parse_max_shapes
from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import UNBOUNDED, ModelSpec, TensorSpec, format_shape

#: (what, folder): an output folder the load creates and needs writable
OutputFolder = tuple[str, Path]


def checked_options(options: Mapping[str, Any], version_dir: Path) -> tuple[AclOptions, tuple[OutputFolder, ...]]:
    """The engine's options as the load reads them, with acl.json and the dump config checked
    against the keys CANN reads (a mistake names the parameter, the file and the key) and the
    combinations CANN refuses or silently overrides refused; and the output folders the load
    creates (nothing is created here)."""
    parsed = AclOptions.read(options, version_dir)
    folders: list[OutputFolder] = []
    for name, path, sections in (("acl_json", parsed.acl_json, None), ("acl_dump_config", parsed.dump_config, "dump")):
        if path is None:
            continue
        config = read_acl_json(path, f"parameter {name!r}:")
        if name == "acl_json":
            _refuse_combinations(config, parsed)
        found = [str(p) for p in problems(config) if sections is None or p.key.startswith(sections)]
        found += [f"{key}: is not a key CANN reads (it would be ignored)" for key in ignored_keys(config)]
        if found:
            raise ConfigError(f"parameter {name!r}: {path}: " + "; ".join(found))
        folders += [(f"parameter {name!r}: {path}: {key}", folder) for key, folder in config.output_folders()]
    if parsed.profiling is not None:
        folders.append(("parameter 'acl_profiling_dir'", parsed.profiling.folder))
    return parsed, tuple(folders)


def _refuse_combinations(config: AclJson, parsed: AclOptions) -> None:
    """acl.json profiling that is on puts msprof in command mode (SetModeToCmd, prof_acl_mgr.cpp
    1853-1863, reached only with "switch": "on", 2102-2105 and msprofiler_impl.cpp 121-123), and
    acl.prof.init then returns 100042 (ProfInitPrecheck, prof_acl_mgr.cpp 525-536). acl.json dump
    that is on and acl_dump_config share one dump manager: the docs say init_dump then fails with
    100044 (18_dump_configuration.md 84); the current code accepts it (dump.cpp 103-137, the dump
    server is reference counted, adx_datadump_server.cpp 57-63), but set_dump replaces the acl.json
    config and finalize_dump switches every opened dump off (dump_manager.cpp 306-380). Either way
    one setting would undo the other."""
    if config.profiles and parsed.profiling is not None:
        raise ConfigError(
            f"parameters 'acl_json' and 'acl_profiling_dir' cannot be combined: {config.path} switches "
            'profiling on ("profiler": {"switch": "on"}), and acl.prof.init then fails with 100042 '
            "(ACL_ERROR_PROF_ALREADY_RUN); use one of them"
        )
    if config.dumps and parsed.dump_config is not None:
        raise ConfigError(
            f"parameters 'acl_json' and 'acl_dump_config' cannot be combined: {config.path} switches dump on, "
            "and acl_dump_config's set_dump would replace that config (finalize_dump then switches all dump "
            "off; older CANN refuses init_dump with 100044); put the dump section in one of them"
        )


def aipp_config_problem(configs: tuple[AippConfig, ...], spec: ModelSpec) -> str | None:
    """Why a block of the aipp_config file names no dynamic-AIPP image: related_input_rank counts
    the model's own inputs, as in ATC's --insert_op_conf (config_file_template.md 93-96)."""
    inputs = spec.inputs
    images = [i for i, t in enumerate(inputs) if t.dynamic_aipp]
    for config in configs:
        if config.related_input_rank not in images:
            listed = ", ".join(f"{i} ({inputs[i].name})" for i in images) or "none"
            return (
                f"parameter 'aipp_config': related_input_rank {config.related_input_rank} is not an input with "
                f"dynamic AIPP; the model's are: {listed}"
            )
    return None


def rank_problem(kind: str, name: str, dims: Shape, given: Shape) -> str | None:
    """Why the acl_max_shapes entry ``given`` does not fit the tensor's rank (None: it does)."""
    if len(given) == len(dims):
        return None
    return f"parameter 'acl_max_shapes' gives {name!r} rank {len(given)}; the model's {kind} has {format_shape(dims)}"


def unbounded_problem(kind: str, name: str, dims: Shape) -> str:
    """What to do about a tensor whose buffer cannot be sized: its largest shape in acl_max_shapes."""
    example = ",".join("8" if d < 0 else str(d) for d in dims)
    return (
        f"{kind} {name!r} {format_shape(dims)} has no upper bound on its shape, so its buffer cannot be sized: "
        f"give its largest shape in parameter acl_max_shapes, e.g. {name}:{example} "
        f"(ge-triton generate --max-shapes '{name}:{example}')"
    )


def max_shapes_problems(spec: ModelSpec, max_shapes: Mapping[str, Shape]) -> list[str]:
    """Entries of acl_max_shapes that name no input or output of the model, or give another rank."""
    tensors = {t.name: ("input", t) for t in spec.inputs} | {t.name: ("output", t) for t in spec.outputs}
    found = []
    for name, given in max_shapes.items():
        if name not in tensors:
            inputs, outputs = (", ".join(t.name for t in group) for group in (spec.inputs, spec.outputs))
            found.append(
                f"parameter 'acl_max_shapes' names {name!r}, which is neither an input nor an output of the model "
                f"(inputs: {inputs}; outputs: {outputs})"
            )
            continue
        kind, tensor = tensors[name]
        problem = rank_problem(kind, name, tensor.shape, given)
        if problem:
            found.append(problem)
    return found


def unbounded_tensors(spec: ModelSpec) -> list[tuple[str, TensorSpec]]:
    """(kind, tensor) of every tensor the runtime reports size 0 for, as far as the model file tells:
    a range input with an axis without upper bound, and then each output with a -1 axis (its range
    follows the unbounded input; the simulator reports 0 for it). A dynamic-AIPP image is not one:
    its buffer is max_src_image_size."""
    inputs = [t for t in spec.inputs if any(high == UNBOUNDED for _, high in t.ranges) and not t.dynamic_aipp]
    if not inputs:
        return []
    return [("input", t) for t in inputs] + [("output", t) for t in spec.outputs if -1 in t.shape]


def unbounded_problems(spec: ModelSpec, max_shapes: Mapping[str, Shape]) -> list[str]:
    """The tensors that need an acl_max_shapes entry and have none (inferred from the model file)."""
    return [unbounded_problem(kind, t.name, t.shape) for kind, t in unbounded_tensors(spec) if t.name not in max_shapes]


def generated_max_shapes(spec: ModelSpec, max_batch_size: int, given: Mapping[str, Shape]) -> dict[str, Shape]:
    """The acl_max_shapes a generated config needs: ``given`` (``--max-shapes``), plus each unbounded
    tensor whose only open axis is the batch axis, at ``max_batch_size`` (0: nothing can be derived)."""
    max_shapes = dict(given)
    for _, tensor in unbounded_tensors(spec):
        open_axes = [axis for axis, d in enumerate(tensor.shape) if d < 0]
        if tensor.name not in max_shapes and max_batch_size > 0 and open_axes == [0]:
            max_shapes[tensor.name] = (max_batch_size,) + tensor.shape[1:]
    return max_shapes


def offline_problems(options: Mapping[str, Any], version_dir: Path, spec: ModelSpec) -> list[str]:
    """Everything above for ``options`` (the parsed values of the engine parameters a config sets),
    as ``ge-triton check`` reports it."""
    try:
        parsed, _ = checked_options(options, version_dir)
    except ConfigError as exc:
        return [str(exc)]
    found = max_shapes_problems(spec, parsed.max_shapes) + unbounded_problems(spec, parsed.max_shapes)
    aipp = aipp_config_problem(parsed.aipp, spec)
    return found + ([aipp] if aipp else [])


def generated_parameters(spec: ModelSpec, max_batch_size: int, given: Mapping[str, str]) -> dict[str, str]:
    """The acl_max_shapes a generated config writes (``generated_max_shapes``), from ``given``'s text."""
    text = given.get("acl_max_shapes", "")
    try:
        shapes = parse_max_shapes(text) if text else {}
    except ValueError as exc:
        raise ConfigError(f"--max-shapes {text!r}: {exc}") from None
    problems = max_shapes_problems(spec, shapes)
    if problems:
        raise ConfigError(problems[0].replace("parameter 'acl_max_shapes'", "--max-shapes"))
    max_shapes = generated_max_shapes(spec, max_batch_size, shapes)
    if not max_shapes:
        return {}
    return {"acl_max_shapes": ";".join(f"{name}:{','.join(map(str, shape))}" for name, shape in max_shapes.items())}
