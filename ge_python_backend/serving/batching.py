"""Batch planning, gather and scatter: pure functions over shapes and arrays.

Vocabulary:
- an *item* is one request's tensors (after preprocessing): ``rows`` along axis 0 and a
  non-batch shape per input;
- a *profile* is a family of batches the engine can run: the batch sizes it accepts and the
  non-batch shape of each input (from the model's gears);
- a *chunk* is one engine call: a batch size (padded up to a size the profile accepts) and the
  *parts* that fill it, each a run of rows of one item.

Items whose non-batch shapes differ are never put into one chunk, and only the batch axis is
ever padded: a non-batch axis must be exactly what a profile runs (zero-padding an image or a
sequence up to a larger compiled shape changes the model's answer, so a request between two
compiled shapes is an input error naming them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, Protocol, TypeVar

import numpy as np

from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.specs import ModelSpec, ShapeGear, format_shape

NonBatchShapes = Mapping[str, tuple[int, ...]]
_T_co = TypeVar("_T_co", covariant=True)


class ByIndex(Protocol[_T_co]):
    """Values looked up by item index: a list in index order, or a dict keyed by index."""

    def __getitem__(self, index: int, /) -> _T_co: ...


@dataclass(frozen=True)
class Profile:
    """Batches an engine runs: ``batch_sizes`` (None: any size up to ``limit``; ``limit`` None:
    unbounded) and each input's non-batch shape (-1: any size; a compiled shape gear gives one
    profile per gear, whose sizes a request must match exactly). ``whole`` names outputs that do
    not carry the batch: padding rows or splitting a request would change them, so a request must
    fill exactly one of ``batch_sizes``."""

    batch_sizes: tuple[int, ...] | None
    limit: int | None
    shapes: NonBatchShapes
    label: str = ""
    whole: tuple[str, ...] = ()

    def fits(self, shapes: NonBatchShapes) -> bool:
        """``shapes`` run here as they are: every axis equal, or -1 (any size) in the profile."""
        for name, want in self.shapes.items():
            have = shapes[name]
            if len(have) != len(want) or any(w not in (-1, h) for h, w in zip(have, want)):
                return False
        return True

    def resolve(self, shapes: NonBatchShapes) -> dict[str, tuple[int, ...]]:
        """Concrete non-batch shapes to run ``shapes`` on this profile."""
        return {
            name: tuple(h if w == -1 else w for h, w in zip(shapes[name], want)) for name, want in self.shapes.items()
        }

    def size(self, shapes: NonBatchShapes) -> int:
        return sum(math.prod(s) for s in self.resolve(shapes).values())

    def describe(self) -> str:
        shapes = ", ".join(f"{n} {format_shape(s)}" for n, s in self.shapes.items())
        if self.batch_sizes == ():
            batches = "no batch axis, each request as it is"
        elif self.batch_sizes is not None:
            batches = "batch " + "/".join(str(b) for b in self.batch_sizes)
        else:
            batches = "any batch" if self.limit is None else f"batch 1..{self.limit}"
        return f"{self.label + ': ' if self.label else ''}{batches}; {shapes}"


def profiles_for(
    spec: ModelSpec, batching: bool, max_batch_size: int, whole: tuple[str, ...] = ()
) -> tuple[Profile, ...]:
    """The profiles of a model, for a config that batches (axis 0 is the request batch) or not.

    Without batching (``max_batch_size: 0``) a model that has a batch axis still runs each
    request's axis 0 through the same profiles, and a model without one runs each request
    exactly as declared, or as one of its shape gears (batch_sizes == () marks that case).
    ``whole``: outputs that do not carry the batch (only without batching: each request must then
    be exactly one batch gear).
    """
    kind = spec.batch.kind
    if whole and batching:
        raise ConfigError(
            f"max_batch_size is above 0 but output(s) {', '.join(map(repr, whole))} do not carry the batch, so "
            "one engine batch cannot be split between requests; set max_batch_size: 0"
        )
    if kind == "none":
        if batching:
            raise ConfigError(
                "max_batch_size is above 0 but the model has no batch axis (axis 0 is not dynamic or "
                "differs between tensors); set max_batch_size: 0"
            )
        gears = spec.shape_gears or (ShapeGear({t.name: t.shape for t in spec.inputs}),)
        return tuple(
            Profile((), None, {t.name: tuple(gear.shapes.get(t.name, t.shape)) for t in spec.inputs}, label=gear.label)
            for gear in gears
        )
    limit = max_batch_size if batching else None
    sizes = None if kind == "dynamic" else spec.batch.sizes
    if not spec.shape_gears:
        return (Profile(sizes, limit, {t.name: t.shape[1:] for t in spec.inputs}, whole=whole),)
    merged: dict[tuple, list] = {}
    for gear in spec.shape_gears:
        full = {t.name: tuple(gear.shapes.get(t.name, t.shape)) for t in spec.inputs}
        key = tuple(sorted((n, s[1:]) for n, s in full.items()))
        gear_batches = {s[0] for s in full.values() if s and s[0] != -1}
        entry = merged.setdefault(key, [set(), gear.label, {n: s[1:] for n, s in full.items()}])
        entry[0] |= gear_batches
    return tuple(
        Profile(tuple(sorted(batches)) if batches else sizes, limit, shapes, label=label, whole=whole)
        for batches, label, shapes in merged.values()
    )


def choose_profile(profiles: Sequence[Profile], shapes: NonBatchShapes) -> Profile:
    """The smallest profile that runs items of ``shapes`` exactly; InputError naming the compiled
    shapes if none (a shape between two gears is never padded up to the larger one)."""
    fitting = [p for p in profiles if p.fits(shapes)]
    if not fitting:
        got = ", ".join(f"{n} {format_shape(s)}" for n, s in shapes.items())
        options = "; ".join(p.describe() for p in profiles)
        raise InputError(
            f"no compiled shape of the model is the request's ({got}), and only the batch axis may be padded; "
            f"the model runs: {options}"
        )
    return min(fitting, key=lambda p: p.size(shapes))


@lru_cache(maxsize=4096)
def split_rows(rows: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Engine batch sizes that cover ``rows`` with the fewest calls, then the least padding.

    Returned largest first; their sum minus ``rows`` is the padding.
    """
    # best[r] = (calls, padded total, size chosen last) for covering r rows.
    best: list[tuple[int, int, int]] = [(0, 0, 0)]
    for covered in range(1, rows + 1):
        best.append(
            min((best[max(0, covered - size)][0] + 1, best[max(0, covered - size)][1] + size, size) for size in sizes)
        )
    chosen, left = [], rows
    while left > 0:
        size = best[left][2]
        chosen.append(size)
        left = max(0, left - size)
    return tuple(sorted(chosen, reverse=True))


def engine_batches(rows: int, profile: Profile) -> tuple[int, ...]:
    """The padded batch size of each chunk needed to run ``rows`` rows on ``profile``;
    InputError when the profile takes only exact batches and ``rows`` is not one of them."""
    if profile.whole and (profile.batch_sizes is None or rows not in profile.batch_sizes):
        sizes = "any" if profile.batch_sizes is None else ", ".join(map(str, profile.batch_sizes))
        raise InputError(
            f"the request has {rows} row(s), but the model runs batches of {sizes} row(s) and its output(s) "
            f"{', '.join(map(repr, profile.whole))} do not carry the batch (padding or splitting the request "
            "would change them): send exactly one of those row counts"
        )
    if profile.batch_sizes is None:
        if profile.limit is None or rows <= profile.limit:
            return (rows,)
        full, rest = divmod(rows, profile.limit)
        return (profile.limit,) * full + ((rest,) if rest else ())
    return split_rows(rows, profile.batch_sizes)


@dataclass(slots=True)
class Part:
    """Rows ``[source_start, source_start + count)`` of item ``item`` at ``target_start`` of a chunk.

    (Not frozen: a batch makes one per request, and a frozen dataclass costs several times more to
    build. Nothing changes a Part once planned.)"""

    item: int
    source_start: int
    count: int
    target_start: int


class Chunk(NamedTuple):
    """One engine call: ``shapes`` are the full (padded) input shapes; ``rows`` real rows."""

    shapes: Mapping[str, tuple[int, ...]]
    parts: tuple[Part, ...]
    rows: int
    batch_axis: bool = True

    @property
    def padding(self) -> int:
        """Rows of padding (0 for a model without a batch axis)."""
        if not self.batch_axis:
            return 0
        return next(iter(self.shapes.values()))[0] - self.rows


def plan_group(items: Sequence[int], rows: ByIndex[int], shapes: NonBatchShapes, profile: Profile) -> list[Chunk]:
    """Chunks that run ``items`` (indices, in order, each with ``rows[i]`` rows and non-batch
    ``shapes``) on ``profile``. Items may be split across chunks."""
    if profile.batch_sizes == ():
        return [
            Chunk(dict(profile.resolve(shapes)), (Part(item, 0, rows[item], 0),), rows[item], batch_axis=False)
            for item in items
        ]
    resolved = profile.resolve(shapes)
    total = sum(rows[i] for i in items)
    chunks = []
    pending = [(item, rows[item]) for item in items if rows[item] > 0]
    next_item, start = 0, 0  # the first row of pending[next_item] not yet planned
    for batch in engine_batches(total, profile):
        parts, filled = [], 0
        while next_item < len(pending) and filled < batch:
            item, count = pending[next_item]
            left = count - start
            take = min(left, batch - filled)
            parts.append(Part(item, start, take, filled))
            filled += take
            if take == left:
                next_item, start = next_item + 1, 0
            else:
                start += take
        chunks.append(Chunk({n: (batch,) + s for n, s in resolved.items()}, tuple(parts), filled))
    return chunks


def gather(chunk: Chunk, items: ByIndex[Mapping[str, np.ndarray]], buffers: Mapping[str, np.ndarray]) -> None:
    """Copy each part's rows (of its item's arrays by input name) into the chunk's input buffers
    and zero the padding rows. The batch axis is the only one padded: parts fill rows 0..rows in
    order, each with the buffer's row shape, so one C call (a concatenation into the buffer)
    gathers them; a row of another shape cannot be written (ValueError), never zero-padded. A
    whole item goes as it is (no view of it is made)."""
    for name, buffer in buffers.items():
        if not chunk.batch_axis:
            source = items[chunk.parts[0].item][name]
            if source.shape != buffer.shape:  # copyto would broadcast it
                raise ValueError(f"input {name!r} {format_shape(source.shape)} into {format_shape(buffer.shape)}")
            np.copyto(buffer, source, casting="no")
            continue
        sources = []
        for part in chunk.parts:
            source = items[part.item][name]
            if part.source_start or len(source) != part.count:
                source = source[part.source_start : part.source_start + part.count]
            sources.append(source)
        if len(sources) == 1:
            if sources[0].shape != buffer[: chunk.rows].shape:  # copyto would broadcast it
                raise ValueError(
                    f"input {name!r} {format_shape(sources[0].shape)} into {format_shape(buffer[: chunk.rows].shape)}"
                )
            np.copyto(buffer[: chunk.rows], sources[0], casting="no")
        else:
            np.concatenate(sources, axis=0, out=buffer[: chunk.rows], casting="no")
        if chunk.rows < buffer.shape[0]:
            buffer[chunk.rows :].fill(0)


def scatter(
    chunk: Chunk, outputs: Mapping[str, np.ndarray], whole: tuple[str, ...] = ()
) -> list[tuple[Part, dict[str, np.ndarray]]]:
    """Each part's rows of every output (views, no copies); outputs in ``whole`` do not carry
    the batch and go to the chunk's only part as they are. ``outputs`` are batch-first views:
    an output whose batch axis does not have the chunk's batch size is an error, never split."""
    if not chunk.batch_axis:
        return [(chunk.parts[0], dict(outputs))]
    batch = next(iter(chunk.shapes.values()))[0]
    for name, array in outputs.items():
        if name in whole:
            if len(chunk.parts) != 1:
                raise ValueError(f"output {name!r} does not carry the batch but the batch holds several requests")
            continue
        if array.ndim == 0 or array.shape[0] != batch:
            raise ValueError(
                f"output {name!r} has shape {format_shape(array.shape)} (batch axis first); expected its batch "
                f"axis to be {batch}, the batch that ran: its rows cannot be split back per request"
            )
    return [
        (
            part,
            {
                name: array if name in whole else array[part.target_start : part.target_start + part.count]
                for name, array in outputs.items()
            },
        )
        for part in chunk.parts
    ]
