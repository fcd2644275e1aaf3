"""What a Triton config must declare to serve a model: one answer for ``generate`` and for
auto-complete (GEModel's ``auto_complete_config``).

``derive_config(spec, request)`` turns a ``ModelSpec`` into a ``DerivedConfig``: ``max_batch_size``,
the preferred batch sizes, the client inputs and outputs as config entries and notes on the
choices. It never derives a config tritonserver 2.51 refuses at load (CORE r24.10
``src/model_config_utils.cc``, ``ValidateIOShape`` :296-420) or one whose every request fails:

- ``dims`` may not be empty (:314-318), and a model without batching may not have an empty
  ``reshape`` (:323-330): a rank-0 tensor is ``dims: [1]``, with ``reshape: { shape: [] }``
  only when the model batches (the per-row scalar of an unbatched input);
- a dim is >= 1 or -1 (:332-341): a zero-size output axis becomes -1 (the output is empty), a
  zero-size input axis is refused (such a request would be empty);
- a data type must be set (:308-312): a tensor without a Triton type, or BF16 (which the Python
  backend cannot hand over as numpy), is refused with what to do;
- ``preferred_batch_size`` is positive and <= ``max_batch_size`` (:1425-1437);
- ``max_batch_size`` never above what the model runs in one batch: its largest batch gear, or the
  upper bound of a shape range's axis 0 (a batch above it would fail in the engine);
- batching only where every tensor the client sees keeps the batch on axis 0 and every output
  carries it: rows of one request never reach another.

``complete_config`` fills a config (Triton's JSON form, as auto-complete gets it) from a derived one,
keeping what the config declares and refusing what contradicts the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.modelconfig.matching import range_limit_text
from ge_python_backend.serving.axes import Layout
from ge_python_backend.specs import ModelSpec, TensorSpec, config_type, format_shape

#: Default largest batch for a model whose batch axis takes any size.
DEFAULT_DYNAMIC_MAX_BATCH = 8
#: dynamic_batching.max_queue_delay_microseconds written by default.
DEFAULT_QUEUE_DELAY_US = 500


@dataclass(frozen=True)
class ConfigTensor:
    """One config ``input``/``output`` entry: dims as Triton sees them (no batch axis when the
    model batches); ``reshape`` the shape the model gets (None: no reshape)."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The entry in Triton's JSON form (``args["model_config"]``, auto-complete)."""
        entry: dict[str, Any] = {"name": self.name, "data_type": self.data_type, "dims": list(self.dims)}
        if self.reshape is not None:
            entry["reshape"] = {"shape": list(self.reshape)}
        return entry


@dataclass(frozen=True)
class ConfigChoices:
    """What the caller decides: where tensors keep their batch (parameters), the state tensors
    (the model's own, never in the config) and overrides of the batching (None: from the model).
    ``source`` names where ``max_batch_size`` came from in messages (a flag or a config field).
    ``client_inputs``/``client_outputs`` False: hooks replace the model's tensors on that side
    (a template's or model.py's own), so none are derived there."""

    layout: Layout = field(default_factory=Layout)
    states: frozenset[str] = frozenset()
    max_batch_size: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    source: str = "--max-batch-size"
    preferred_source: str = "--preferred-batch-sizes"
    client_inputs: bool = True
    client_outputs: bool = True


@dataclass(frozen=True)
class DerivedConfig:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...]
    inputs: tuple[ConfigTensor, ...]
    outputs: tuple[ConfigTensor, ...]
    notes: tuple[str, ...]

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0


def derive_config(spec: ModelSpec, request: ConfigChoices) -> DerivedConfig:
    """The config a model needs (see the module docstring); ConfigError when none can serve it."""
    inputs = [t for t in spec.inputs if t.name not in request.states and request.client_inputs]
    outputs = [t for t in spec.outputs if t.name not in request.states and request.client_outputs]
    for kind, tensor in [("input", t) for t in inputs] + [("output", t) for t in outputs]:
        _check_tensor(kind, tensor)
    layout = request.layout.with_model(spec)
    max_batch, preferred, notes = _batching(spec, layout, request)
    moved = layout.batch_first_spec(spec)
    planned_inputs = tuple(
        _entry(
            t,
            moved.input(t.name) if max_batch and layout.axis(t.name) is not None else t,
            batched=bool(max_batch) and layout.axis(t.name) is not None,
            batching=bool(max_batch),
            notes=notes,
        )
        for t in inputs
    )
    planned_outputs = tuple(
        _entry(
            t,
            moved.output(t.name) if max_batch else t,
            batched=bool(max_batch),
            batching=bool(max_batch),
            notes=notes,
        )
        for t in outputs
    )
    return DerivedConfig(max_batch, preferred, planned_inputs, planned_outputs, tuple(notes))


def _check_tensor(kind: str, tensor: TensorSpec) -> None:
    if not tensor.dtype or tensor.dtype == "BF16":
        raise ConfigError(
            f"{kind} {tensor.name!r} has type {tensor.dtype or tensor.native_type}, which the Python "
            "backend cannot carry as a numpy array; use a template whose preprocess/postprocess converts it"
        )
    if tensor.dynamic_rank:
        raise ConfigError(
            f"{kind} {tensor.name!r} has no rank in the model file (its shape is left open), and a Triton config "
            f"needs one: give it dims, e.g. `ge-triton generate --shape {tensor.name}:-1,-1` for a rank-2 tensor, "
            "or declare its dims in config.pbtxt"
        )
    if kind == "input" and 0 in tensor.shape:
        raise ConfigError(
            f"input {tensor.name!r} {format_shape(tensor.shape)} has a zero-size axis: every request for it would be "
            "empty, which Triton refuses (dims must be >= 1 or -1); export the model with a non-empty input"
        )


def _entry(tensor: TensorSpec, moved: TensorSpec, *, batched: bool, batching: bool, notes: list[str]) -> ConfigTensor:
    dims = moved.shape[1:] if batched else tensor.shape
    if 0 in dims:
        notes.append(
            f"output {tensor.name!r} {format_shape(tensor.shape)} has a zero-size axis; Triton refuses dims 0, so it "
            "is declared -1 there (the output is empty)"
        )
        dims = tuple(-1 if d == 0 else d for d in dims)
    config_dtype = config_type(tensor.dtype)
    if dims:
        return ConfigTensor(tensor.name, config_dtype, dims)
    # A scalar: Triton has no empty dims; an empty reshape is allowed only when batching.
    return ConfigTensor(tensor.name, config_dtype, (1,), () if batching else None)


def _batching(spec: ModelSpec, layout: Layout, request: ConfigChoices) -> tuple[int, tuple[int, ...], list[str]]:
    """(max_batch_size, preferred batch sizes, notes)."""
    notes: list[str] = []
    batch = layout.batch_first_spec(spec).batch
    wanted = request.max_batch_size
    unsplittable = _unsplittable(spec, layout)
    max_batch: int
    preferred: tuple[int, ...]
    if unsplittable:
        if wanted:
            raise ConfigError(
                f"{request.source} {wanted} conflicts with the model: {unsplittable[0]}, so it can only be served "
                "with max_batch_size 0"
            )
        notes.append(f"max_batch_size 0: {'; '.join(unsplittable)}; each request runs alone")
        if batch.kind == "gears":
            notes.append(
                f"the model runs batches of {', '.join(map(str, batch.sizes))} row(s): GEModel pads a request to the "
                "next one and keeps only its own rows"
                if not layout.whole_outputs(spec)
                else f"a request must hold exactly {', '.join(map(str, batch.sizes))} row(s) (the model's batch gears)"
            )
        max_batch, preferred = 0, ()
    elif batch.kind == "none":
        if wanted:
            raise ConfigError(
                f"{request.source} {wanted} conflicts with the model: it has no batch axis on axis 0 "
                "(some tensor's axis 0 is fixed or differs), so it can only be served with max_batch_size 0"
            )
        notes.append("max_batch_size 0: the model has no batch axis on axis 0, each request runs alone")
        notes += _batching_hints(spec, layout)
        max_batch, preferred = 0, ()
    elif batch.kind == "static":
        if wanted is None:
            notes.append(
                f"max_batch_size 0: axis 0 is fixed at {batch.sizes[0]} in the model file (no dynamic batch), "
                "so requests carry the full shape and run alone"
            )
        elif wanted:
            notes.append(f"requests are padded or split to the model's fixed batch {batch.sizes[0]}")
        max_batch, preferred = wanted or 0, ()
    elif batch.kind == "gears":
        largest = batch.sizes[-1]  # gears always list their sizes (BatchSupport checks)
        if wanted is not None and wanted > largest:
            raise ConfigError(
                f"{request.source} {wanted} is above the model's largest batch gear {largest} "
                f"(gears {', '.join(map(str, batch.sizes))})"
            )
        max_batch = largest if wanted is None else wanted
        preferred = tuple(g for g in batch.sizes if g <= max_batch)
    else:
        limit = batch.limit  # a shape range's bound on axis 0 (None: any batch)
        if wanted is not None and limit is not None and wanted > limit:
            raise ConfigError(f"{request.source} {wanted} is above {range_limit_text(batch, spec)}")
        default = DEFAULT_DYNAMIC_MAX_BATCH if limit is None else min(DEFAULT_DYNAMIC_MAX_BATCH, limit)
        max_batch = default if wanted is None else wanted
        preferred = ()
    if request.preferred_batch_sizes is not None:
        preferred = request.preferred_batch_sizes
    _check_preferred(preferred, max_batch, batch.sizes if batch.kind == "gears" else None, request)
    return max_batch, preferred, notes


def _check_preferred(
    preferred: tuple[int, ...], max_batch: int, gears: tuple[int, ...] | None, request: ConfigChoices
) -> None:
    if preferred and max_batch == 0:
        raise ConfigError(
            f"{request.preferred_source} {','.join(map(str, preferred))} conflicts with max_batch_size 0 "
            "(the model has no usable batch axis, or max_batch_size 0 was given); give --max-batch-size N "
            "when the model's batch axis allows batching"
        )
    bad = [p for p in preferred if not 1 <= p <= max_batch]
    if bad:
        raise ConfigError(f"preferred batch size {bad[0]} is outside 1..max_batch_size ({max_batch})")
    off_gear = [p for p in preferred if gears is not None and p not in gears]
    if off_gear and gears is not None:
        raise ConfigError(
            f"preferred batch size {off_gear[0]} is not one of the model's batch gears {', '.join(map(str, gears))}"
        )


def _unsplittable(spec: ModelSpec, layout: Layout) -> list[str]:
    """Why one engine batch could not hold rows of several requests (empty: it can)."""
    reasons = [
        f"output {name!r} {spec.output(name).shape_text()} keeps the batch on axis {axis}, not on axis 0 where "
        "Triton's batching puts it"
        for name, axis in layout.moved_outputs(spec).items()
    ]
    reasons += [
        f"output {name!r} {spec.output(name).shape_text()} does not carry the batch (it does not change with the "
        "batch gear)"
        for name in layout.whole_outputs(spec)
    ]
    return reasons


def _batching_hints(spec: ModelSpec, layout: Layout) -> list[str]:
    """What would let a model without a batch axis on axis 0 batch: flags to try."""
    hints = []
    scalars = [t.name for t in spec.inputs if not t.shape and layout.axis(t.name) is not None]
    if scalars:
        names = ",".join(scalars)
        hints.append(
            f"input(s) {', '.join(map(repr, scalars))} are scalars; if each is one value per request, "
            f"--unbatched-inputs {names} lets the other inputs batch"
        )
    for tensor in spec.inputs + spec.outputs:
        if layout.axis(tensor.name) == 0 and tensor.shape and tensor.shape[0] != -1 and -1 in tensor.shape[1:]:
            axis = tensor.shape.index(-1)
            hints.append(
                f"{tensor.name!r} {format_shape(tensor.shape)} is dynamic on axis {axis}, not 0; if it is recurrent "
                f"state laid out with the batch there, --sequence --state IN=OUT --state-batch-axis {axis} serves it "
                "per sequence"
            )
            break
    return hints


# -- auto-complete: a declared config completed from a derived one ------------------------------------


def wanted_batch(config: Mapping[str, Any]) -> int | None:
    """The ``max_batch_size`` a config asks for, None when it leaves it to the model.

    Triton's JSON has 0 both for "not set" and for "set to 0"; a config that lists inputs or
    outputs of its own is a written-out config, whose 0 is taken as meant."""
    declared = int(config.get("max_batch_size", 0) or 0)
    if declared or config.get("input") or config.get("output"):
        return declared
    return None


def complete_config(
    config: MutableMapping[str, Any],
    derived: DerivedConfig,
    *,
    fill_inputs: bool = True,
    fill_outputs: bool = True,
    queue_delay_us: int = DEFAULT_QUEUE_DELAY_US,
) -> list[str]:
    """Fill ``config`` (Triton's JSON form) from ``derived`` (made for the config's own
    ``max_batch_size`` when it declares one: ``wanted_batch``): ``max_batch_size``, the inputs and
    outputs (unless a hook replaces them: ``fill_inputs``/``fill_outputs`` False) and
    ``dynamic_batching`` with the preferred sizes when no scheduler is set. What the config
    declares is kept; a contradiction is a ConfigError naming the field, the model's value and
    the config's. Returns what was filled, one line each."""
    filled: list[str] = []
    if int(config.get("max_batch_size", 0) or 0) != derived.max_batch_size:
        config["max_batch_size"] = derived.max_batch_size
        filled.append(f"max_batch_size {derived.max_batch_size}")
    if fill_inputs:
        filled += _complete_tensors(config, "input", derived.inputs)
    if fill_outputs:
        filled += _complete_tensors(config, "output", derived.outputs)
    schedulers = ("dynamic_batching", "sequence_batching", "ensemble_scheduling")
    if derived.batching and not any(key in config for key in schedulers):
        config["dynamic_batching"] = {
            "preferred_batch_size": list(derived.preferred_batch_sizes),
            "max_queue_delay_microseconds": queue_delay_us,
        }
        filled.append(
            f"dynamic_batching (preferred_batch_size {list(derived.preferred_batch_sizes)}, "
            f"max_queue_delay_microseconds {queue_delay_us})"
        )
    return filled


def _complete_tensors(config: MutableMapping[str, Any], kind: str, wanted: Iterable[ConfigTensor]) -> list[str]:
    entries: list[dict[str, Any]] = config.setdefault(kind, [])
    wanted = list(wanted)
    names = [t.name for t in wanted]
    for entry in entries:
        if entry.get("name") not in names:
            raise ConfigError(f"config {kind} {entry.get('name')!r} is not a model {kind}; the model has {names}")
    by_name = {entry.get("name"): entry for entry in entries}
    filled: list[str] = []
    for tensor in wanted:
        found = by_name.get(tensor.name)
        if found is None:
            entries.append(tensor.as_dict())
            filled.append(f"{kind} {tensor.name!r} {tensor.data_type} dims {list(tensor.dims)}")
            continue
        entry = found
        data_type = entry.get("data_type") or "TYPE_INVALID"
        if data_type == "TYPE_INVALID":
            entry["data_type"] = tensor.data_type
        elif data_type != tensor.data_type:
            raise ConfigError(
                f"{kind} {tensor.name!r} data_type: the model has {tensor.data_type}, the config says {data_type}"
            )
        dims = [int(d) for d in entry.get("dims") or []]
        if not dims:
            entry["dims"] = list(tensor.dims)
            if tensor.reshape is not None and "reshape" not in entry:
                entry["reshape"] = {"shape": list(tensor.reshape)}
        elif not _dims_fit(dims, tensor.dims):
            raise ConfigError(
                f"{kind} {tensor.name!r} dims: the model has {format_shape(tensor.dims)}, the config says "
                f"{format_shape(tuple(dims))}"
            )
    return filled


def _dims_fit(declared: list[int], model: tuple[int, ...]) -> bool:
    return len(declared) == len(model) and all(d == m or -1 in (d, m) for d, m in zip(declared, model))
