"""Does a Triton config describe a model's own tensors? One answer for GEModel (at load) and
``ge-triton check`` (offline): every disagreement, each as one message.

Also the two things a config adds to what a model file says: the rank of tensors the file
leaves open (``refine_spec``), and whether a batching config fits where the model keeps each
tensor's batch and whether its ``max_batch_size`` is within the batch a shape-range model runs
(``layout_problems``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ge_python_backend.serving.axes import Layout
from ge_python_backend.specs import (
    BatchSupport,
    ModelSpec,
    TensorSpec,
    batch_support_from_shapes,
    format_shape,
    ranges_text,
)


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
    model's own tensors (never in the config); unbatched inputs keep their full shape. A rank-0
    model tensor is declared ``dims: [1]`` (Triton has no scalar dims), with or without an
    empty ``reshape``; a tensor of open rank matches any dims."""
    problems: list[str] = []
    layout = layout.with_model(spec)
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
        produced = {t.name: t for t in spec.outputs if t.name not in states}
        for tensor in config_outputs:
            if tensor.name not in produced:
                problems.append(
                    f"config output {tensor.name!r} is not produced by the model; it produces {sorted(produced)}"
                )
            else:
                model_tensor = produced[tensor.name]
                shape = moved.output(tensor.name).shape if batching else model_tensor.shape
                problems += _compare("output", model_tensor, shape, tensor, batching)
    return problems


def _compare(
    kind: str, model: TensorSpec, shape: tuple[int, ...], config: TensorSpec | None, batched: bool
) -> list[str]:
    if config is None:
        return [
            f"the model's {kind} {model.name!r} ({model.dtype or model.native_type} {model.shape_text()}) is "
            "missing from the config"
        ]
    problems = []
    if config.dtype != model.dtype:
        problems.append(
            f"{kind} {model.name!r}: the config says {config.dtype}, the model has {model.dtype or model.native_type}"
        )
    if model.dynamic_rank:
        return problems
    dims = shape[1:] if batched else shape
    if not dims and config.shape in ((), (1,)):
        return problems  # a scalar: dims [1] (reshape [] or none)
    if len(dims) != len(config.shape) or any(c != m and -1 not in (c, m) for c, m in zip(config.shape, dims)):
        problems.append(
            f"{kind} {model.name!r}: config dims {format_shape(config.shape)} do not match the model's "
            f"{format_shape(dims)}" + (" (batch axis removed)" if batched else "")
        )
    return problems


def refine_spec(
    spec: ModelSpec,
    config_inputs: Iterable[TensorSpec],
    config_outputs: Iterable[TensorSpec],
    *,
    batching: bool,
    layout: Layout,
) -> ModelSpec:
    """``spec`` with every tensor of open rank given the rank (and sizes) its config entry
    declares: the batch axis in front when ``batching`` batches it. Batch support is derived
    again from the completed shapes. Unchanged when no tensor has an open rank."""
    if not any(t.dynamic_rank for t in spec.inputs + spec.outputs):
        return spec
    declared = {t.name: t for t in (*config_inputs, *config_outputs)}

    def refined(tensor: TensorSpec) -> TensorSpec:
        entry = declared.get(tensor.name)
        if not tensor.dynamic_rank or entry is None:
            return tensor
        batched = batching and layout.axis(tensor.name) is not None
        return replace(tensor, shape=((-1,) if batched else ()) + entry.shape, dynamic_rank=False)

    inputs = tuple(refined(t) for t in spec.inputs)
    outputs = tuple(refined(t) for t in spec.outputs)
    return replace(spec, inputs=inputs, outputs=outputs, batch=batch_support_from_shapes(inputs, outputs))


def layout_problems(spec: ModelSpec, layout: Layout, *, max_batch_size: int) -> list[str]:
    """Why a config that batches (``max_batch_size`` > 0) cannot serve ``spec``: Triton puts the
    batch on axis 0 of every client tensor, one engine batch holds rows of several requests, at
    least one input must carry them, and a shape-range model runs batches up to the upper bound
    of its axis 0 only (above it, Triton forms batches the engine refuses, failing every request
    in them)."""
    if max_batch_size <= 0:
        return []
    layout = layout.with_model(spec)
    batch = layout.batch_first_spec(spec).batch
    problems = [
        f"output {name!r} keeps the batch on axis {axis} ({spec.output(name).shape_text()}), but with max_batch_size "
        "> 0 Triton gives clients the batch on axis 0: set max_batch_size 0 (each request then runs alone and gets "
        f"{name!r} in the model's own layout)"
        for name, axis in layout.moved_outputs(spec).items()
    ]
    problems += [
        f"output {name!r} ({spec.output(name).shape_text()}) does not carry the batch, so one engine batch cannot be "
        "split between requests: set max_batch_size 0"
        for name in layout.whole_outputs(spec)
    ]
    if spec.inputs and all(layout.axis(t.name) is None for t in spec.inputs):
        problems.append(
            "max_batch_size > 0 but every model input is unbatched, so no input carries the batch: set max_batch_size 0"
        )
    if batch.kind == "dynamic" and batch.limit is not None and max_batch_size > batch.limit:
        problems.append(
            f"max_batch_size {max_batch_size} is above {range_limit_text(batch, spec)}: set max_batch_size "
            f"{batch.limit} or less"
        )
    return problems


def range_limit_text(batch: BatchSupport, spec: ModelSpec) -> str:
    """The batch bound of a shape-range model, for messages: what it is and where it comes from."""
    ranged = ", ".join(f"{t.name} {ranges_text(t.ranges)}" for t in spec.inputs if t.ranges)
    return f"the largest batch the model runs, {batch.limit} (the upper bound of axis 0 of its shape ranges: {ranged})"
