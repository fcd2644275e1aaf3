"""The fast lane: requests whose tensors match a signature the general path has already validated.

A model is eligible when nothing but a request's tensor names, data types and shapes decides how
it is checked, batched and answered (``refusal`` says why a model is not). Its caller reads each
request's tensors once and looks up their *key*, ``((name, dtype, shape), ...)`` in the request's
order, in ``Lane.known``:

- a hit is a ``Known``: the signature was validated once by the general path's ``Validator``
  (``learn``), so the request's rows are within bounds and its group (the requests it may share a
  batch with) and profile are known;
- a miss (first sight, a bad request) goes through the general path, which stays the reference.

``Lane.batches`` groups the hits, plans each group composition once (cached per the members'
rows), and makes one ``LaneBatch`` per engine batch: it gathers with one copy per input and, when
the engine's outputs are what the config declares (checked once per batch), answers every member
in one pass (``Replies.answer``). Whatever needs more — a request the plan would split between
batches, outputs the config's checks must convert or refuse, an engine failure — is handed to the
general path's own code (``Replies.request`` gives the general view of a request), so answers and
errors are the general path's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ge_python_backend.engines.base import Slot
from ge_python_backend.errors import ContractError, GEError, InputError
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.batching import Chunk, Part, Profile, choose_profile, plan_group
from ge_python_backend.serving.observers import FailureKind
from ge_python_backend.serving.outputs import DeclaredTensor, OutputContract
from ge_python_backend.serving.requests import Arrays, Request, RequestInfo
from ge_python_backend.serving.tracking import Answers
from ge_python_backend.serving.validation import Validator
from ge_python_backend.specs import ModelSpec, numpy_dtype, shape_fits

#: A request's tensors as read: ((name, dtype, shape), ...) in the request's order.
Key = tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
#: distinct keys remembered (validated or refused); beyond it new keys stay on the general path
_KEYS_REMEMBERED = 4096
#: group compositions whose plan is remembered per group (beyond it the cache starts over)
_PLANS_REMEMBERED = 256


@dataclass(eq=False)
class Group:
    """Known signatures whose requests may share a batch (equal non-batch shapes: one profile),
    with the plans of the compositions seen (members' rows -> plan, None: a request would be split)."""

    shapes: dict[str, tuple[int, ...]]
    profile: Profile
    plans: dict[tuple[int, ...], tuple[Planned, ...] | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Known:
    """A validated signature: its group, its rows (the validator's; ``request_rows`` what the
    answer must have, None without batching) and where each model input is among its tensors."""

    group: Group
    rows: int
    request_rows: int | None
    order: tuple[int, ...]


#: One request in the lane: its signature, its arrays in the model's input order, the caller's
#: token for it and the outputs it is answered with (in the config's order).
Item = tuple[Known, tuple[np.ndarray, ...], int, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Planned:
    """One batch of a cached plan: members ``[start, stop)`` of the group fill ``chunk`` (parts
    indexed by member), each member's rows at ``spans`` of the batch (the whole outputs when the
    batch has no batch axis)."""

    chunk: Chunk
    start: int
    stop: int
    spans: tuple[slice, ...]
    batch: int


class Replies(Protocol):
    """How the caller answers the requests it put in the lane (by token)."""

    def answer(self, outputs: Arrays, members: Sequence[Item], spans: Sequence[slice]) -> None:
        """Answer each member with its span of each of its outputs; an answer that cannot be sent
        is logged, never raised."""

    def request(self, token: int, inputs: Arrays) -> Request:
        """The general path's view of request ``token`` (``inputs``: its tensors by name)."""


class GeneralBatch(Protocol):
    """The general path's batch of the same chunk (its requests tracked there)."""

    def answer(self, outputs: Arrays) -> None: ...

    def fail(self, error: GEError, kind: FailureKind) -> None: ...


#: Builds the general path's batch for a chunk of requests: (request, rows, request rows) each.
Adopt = Callable[[Chunk, list[tuple[Request, int, int | None]], Answers | None], GeneralBatch]


def refusal(
    spec: ModelSpec,
    layout: Layout,
    declared: Sequence[DeclaredTensor],
    *,
    hooks: Sequence[str],
    sequences: bool,
    reject_nonfinite: bool,
    engine_settings: bool,
) -> str:
    """Why a model cannot use the lane ("" when it can): anything that needs a request's values,
    its info, or arrays other than the client's own."""
    reasons = [f"a {hook} hook" for hook in hooks]
    if sequences:
        reasons.append("sequence state")
    if reject_nonfinite:
        reasons.append("reject_nonfinite checks values")
    if engine_settings:
        reasons.append("the engine has settings per request (dynamic AIPP)")
    if not layout.all_first:
        reasons.append("a batch axis other than 0")
    if layout.unbatched(spec) or layout.whole_outputs(spec):
        reasons.append("tensors without a batch axis")
    if any(t.dtype == "BYTES" for t in spec.inputs) or any(d.dtype == "BYTES" for d in declared):
        reasons.append("string tensors")
    if any(not t.shape for t in spec.inputs):
        reasons.append("a scalar input")
    return "; ".join(reasons)


class Lane:
    """The known signatures and cached plans of one model (see the module docstring). Used from
    the caller's thread only (Triton's execute thread)."""

    def __init__(
        self,
        validator: Validator,
        spec: ModelSpec,
        profiles: Sequence[Profile],
        outputs: OutputContract,
        declared: Sequence[DeclaredTensor],
        *,
        batching: bool,
        reads_parameters: bool,
        adopt: Adopt,
    ) -> None:
        """``spec``: the model's inputs as the validator checks them; ``reads_parameters``: the
        engine has settings a request's parameters ask for, so a request with any stays on the
        general path; ``adopt``: the runner's general batch for requests the lane hands back."""
        self._validator = validator
        self._profiles = tuple(profiles)
        self._names = outputs.names
        self.inputs = tuple(t.name for t in spec.inputs)
        self.outputs = outputs.names(())
        self.reads_parameters = reads_parameters
        self._batching = batching
        #: the runner's general batch for requests the lane hands back
        self.adopt = adopt
        self._checks = tuple((d.name, numpy_dtype(d.dtype), d.produced) for d in declared)
        #: validated keys (refused ones map to None)
        self.known: dict[Key, Known | None] = {}
        self._groups: dict[tuple, Group] = {}

    def output_names(self, requested: tuple[str, ...]) -> tuple[str, ...] | None:
        """The outputs answering a request that asks for ``requested``; None when the general
        path must refuse it."""
        try:
            return self._names(requested)
        except ContractError:
            return None

    def learn(self, key: Key, pairs: Sequence[tuple[str, np.ndarray]]) -> None:
        """Validate ``key`` once from a request (its tensors: ``pairs``) the general path is about
        to take: known when the general path would run the client's arrays as they are."""
        if key in self.known or len(self.known) >= _KEYS_REMEMBERED:
            return
        self.known[key] = None
        inputs = dict(pairs)
        if len(inputs) != len(pairs):
            return  # a name twice: which one counts is the general path's business
        try:
            prepared = self._validator.prepare(inputs, RequestInfo())
        except GEError:
            return
        if prepared.shared or any(prepared.batched[n] is not inputs[n] for n in self.inputs):
            return  # the validator changed the arrays: the lane would not run what the general path runs
        cut = 1 if self._validator.has_batch_axis else 0
        shapes = tuple((n, prepared.batched[n].shape[cut:]) for n in self.inputs)
        group = self._groups.get(shapes)
        if group is None:
            try:
                profile = choose_profile(self._profiles, dict(shapes))
            except InputError:
                return
            group = self._groups[shapes] = Group(dict(shapes), profile)
        names = [name for name, _, _ in key]
        order = tuple(names.index(n) for n in self.inputs)
        self.known[key] = Known(group, prepared.rows, prepared.request_rows, order)

    def batches(
        self, items: Sequence[Item], replies: Replies, answers: Answers | None
    ) -> tuple[list[LaneBatch], list[Request]]:
        """The lane's batches of ``items``, and the requests it hands to the general path (those
        of a composition whose plan splits a request between batches)."""
        batches: list[LaneBatch] = []
        declined: list[Request] = []
        for members in self._grouped(items):
            plan = self._plan(members)
            if plan is None:
                declined += (self.request(replies, member) for member in members)
                continue
            for planned in plan:
                batches.append(LaneBatch(self, planned, members[planned.start : planned.stop], replies, answers))
        return batches, declined

    def request(self, replies: Replies, item: Item) -> Request:
        """The general path's view of a request of the lane."""
        return replies.request(item[2], dict(zip(self.inputs, item[1])))

    def _grouped(self, items: Sequence[Item]) -> Sequence[Sequence[Item]]:
        if not self._batching:
            return [(item,) for item in items]
        groups: dict[Group, list[Item]] = {}
        for item in items:
            members = groups.get(item[0].group)
            if members is None:
                groups[item[0].group] = [item]
            else:
                members.append(item)
        return list(groups.values())

    def _plan(self, members: Sequence[Item]) -> tuple[Planned, ...] | None:
        group = members[0][0].group
        rows = tuple([max(m[0].rows, 1) for m in members])
        if rows in group.plans:
            return group.plans[rows]
        plan = _whole_requests(plan_group(range(len(rows)), rows, group.shapes, group.profile))
        if len(group.plans) >= _PLANS_REMEMBERED:
            group.plans.clear()
        group.plans[rows] = plan
        return plan

    def fits(self, planned: Planned, outputs: Arrays) -> bool:
        """The engine's outputs are what the config declares for every member's slice of them:
        the config's data type and dims, the batch's rows first (checked once per batch)."""
        chunk = planned.chunk
        for name, dtype, dims in self._checks:
            array = outputs.get(name)
            if array is None or array.dtype != dtype:
                return False
            shape = array.shape
            if chunk.batch_axis:
                if not shape or shape[0] != planned.batch:
                    return False
                shape = shape[1:] if self._batching else (chunk.rows,) + shape[1:]
            if not shape_fits(shape, dims):
                return False
        return True


def _whole_requests(chunks: list[Chunk]) -> tuple[Planned, ...] | None:
    """The chunks as batches of whole members (parts indexed from the batch's first member);
    None when a member is split between chunks (a later part of it starts past its first row)."""
    plan = []
    for chunk in chunks:
        parts = chunk.parts
        if any(p.source_start for p in parts):
            return None
        start = parts[0].item
        local = tuple(Part(p.item - start, 0, p.count, p.target_start) for p in parts)
        spans = tuple(
            slice(p.target_start, p.target_start + p.count) if chunk.batch_axis else slice(None) for p in parts
        )
        batch = next(iter(chunk.shapes.values()))[0] if chunk.batch_axis else 0
        plan.append(Planned(chunk._replace(parts=local), start, parts[-1].item + 1, spans, batch))
    return tuple(plan)


class LaneBatch:
    """One engine batch of the lane (the runner's batch protocol): stage, answer, fail."""

    __slots__ = ("chunk", "copy", "_lane", "_planned", "_members", "_replies", "_answers", "_sent", "_general")

    def __init__(
        self, lane: Lane, planned: Planned, members: Sequence[Item], replies: Replies, answers: Answers | None
    ) -> None:
        self.chunk = planned.chunk
        #: copy the outputs out of slot memory before answering (the slot runs again before they are read)
        self.copy = False
        self._lane = lane
        self._planned = planned
        self._members = members
        self._replies = replies
        self._answers = answers
        self._sent = False
        self._general: GeneralBatch | None = None

    def finished(self) -> bool:
        return False  # only this batch answers its members

    def stage(self, slot: Slot) -> None:
        """Gather the members into ``slot``'s input buffers: one copy per input, padding zeroed."""
        chunk = self.chunk
        buffers = slot.inputs(chunk.shapes)
        members, rows = self._members, chunk.rows
        for index, name in enumerate(self._lane.inputs):
            buffer = buffers[name]
            if not chunk.batch_axis:
                np.copyto(buffer, members[0][1][index], casting="no")
                continue
            if len(members) == 1:
                np.copyto(buffer[:rows], members[0][1][index], casting="no")
            else:
                np.concatenate([m[1][index] for m in members], axis=0, out=buffer[:rows], casting="no")
            if rows < buffer.shape[0]:
                buffer[rows:].fill(0)

    def answer(self, outputs: Arrays) -> None:
        if not self._lane.fits(self._planned, outputs):
            self._adopted().answer(outputs)  # the general path converts, or refuses naming the output
            return
        if self.copy:
            outputs = {name: array.copy() for name, array in outputs.items()}
        self._sent = True
        try:
            self._replies.answer(outputs, self._members, self._planned.spans)
        finally:
            if self._answers is not None:
                self._answers.answered(len(self._members))

    def fail(self, error: GEError, kind: FailureKind) -> None:
        if not self._sent:
            self._adopted().fail(error, kind)

    def _adopted(self) -> GeneralBatch:
        """The general path's batch of the same requests (built once, for the rare way out)."""
        if self._general is None:
            lane, replies = self._lane, self._replies
            requests = [(lane.request(replies, m), m[0].rows, m[0].request_rows) for m in self._members]
            self._general = lane.adopt(self.chunk, requests, self._answers)
        return self._general
