"""Does a Triton config describe a model's own tensors? One answer for GEModel (at load) and
``ge-triton check`` (offline): every disagreement, each as one message."""

from __future__ import annotations

from collections.abc import Iterable

from ge_python_backend.serving.axes import Layout
from ge_python_backend.specs import ModelSpec, TensorSpec, format_shape


def compare_io(
    spec: ModelSpec,
    config_inputs: Iterable[TensorSpec],
    config_outputs: Iterable[TensorSpec],
    *,
    batching: bool,
    layout: Layout,
    states: frozenset[str] = frozenset(),
    overrides: frozenset[str] = frozenset(),
) -> list[str]:
    """Disagreements between the config's I/O (dims as Triton sees them, batch axis removed when
    ``batching``) and the model's. A hook in ``overrides`` turns its side off; ``states`` are the
    model's own tensors (never in the config); unbatched inputs keep their full shape."""
    problems: list[str] = []
    moved = layout.batch_first_spec(spec)
    if "preprocess" not in overrides:
        declared = {t.name: t for t in config_inputs}
        model_inputs = [t for t in spec.inputs if t.name not in states]
        for tensor in model_inputs:
            batched = batching and layout.axis(tensor.name) is not None
            shape = moved.input(tensor.name).shape if batched else tensor.shape
            problems += _compare("input", tensor, shape, declared.get(tensor.name), batched)
        names = {t.name for t in model_inputs}
        problems += [
            f"config input {name!r} is not a model input; the model takes {sorted(names)}"
            for name in declared
            if name not in names
        ]
    if "postprocess" not in overrides:
        produced = {t.name: t for t in moved.outputs if t.name not in states}
        for tensor in config_outputs:
            if tensor.name not in produced:
                problems.append(
                    f"config output {tensor.name!r} is not produced by the model; it produces {sorted(produced)}"
                )
            else:
                model_tensor = produced[tensor.name]
                problems += _compare("output", model_tensor, model_tensor.shape, tensor, batching)
    return problems


def _compare(
    kind: str, model: TensorSpec, shape: tuple[int, ...], config: TensorSpec | None, batched: bool
) -> list[str]:
    if config is None:
        return [
            f"the model's {kind} {model.name!r} ({model.dtype or model.native_type} {format_shape(shape)}) is "
            "missing from the config"
        ]
    problems = []
    if config.dtype != model.dtype:
        problems.append(
            f"{kind} {model.name!r}: the config says {config.dtype}, the model has {model.dtype or model.native_type}"
        )
    dims = shape[1:] if batched else shape
    if len(dims) != len(config.shape) or any(c != m and -1 not in (c, m) for c, m in zip(config.shape, dims)):
        problems.append(
            f"{kind} {model.name!r}: config dims {format_shape(config.shape)} do not match the model's "
            f"{format_shape(dims)}" + (" (batch axis removed)" if batched else "")
        )
    return problems
