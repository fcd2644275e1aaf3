"""BERT-style text encoders: token sequences of any length padded with their attention mask to
the model's sequence sizes, so requests of different lengths run in one batch.

A request carries ``input_ids`` (INT64 or INT32 ``[rows, length]``), and optionally
``attention_mask`` (1 for a token, 0 for padding; default all 1) and ``token_type_ids`` (default
0). The requests of a batch are ordered by length and cut into calls of at most ``max_rows``
rows; each call is padded to the smallest sequence size that holds its longest row (the model's
dims gears, else ``sequence_buckets``), with ``pad_token_id`` tokens whose mask is 0, and, for a
model with dims gears, to the smallest gear batch that holds its rows (rows of zeros, mask 0).
A padded token with mask 0 changes no other token's output in an encoder that masks attention
(BERT adds ``(1 - mask) * -10000`` to the scores), so each request's answer is its rows of the
outputs, per-token outputs (the sequence on axis 1) cut back to its own length: what the model
answers for the request alone, unpadded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ge_python_backend.errors import ConfigError, EngineError, GEError, InputError
from ge_python_backend.params import Parameter, parse_int, parse_list
from ge_python_backend.specs import ModelSpec, format_shape

IDS, MASK, TYPES = "input_ids", "attention_mask", "token_type_ids"
#: the token tensors a request may carry, and what a missing one is filled with
TOKEN_INPUTS = {IDS: None, MASK: 1, TYPES: 0}

TEXT_PARAMETERS = (
    Parameter(
        "sequence_buckets",
        parse_list(parse_int(1)),
        (16, 32, 64, 128, 256, 512),
        "comma-separated integers >= 1",
        "sequence sizes a call is padded to, for a model without dims gears (the smallest that holds it)",
    ),
    Parameter("pad_token_id", parse_int(0), 0, "an integer >= 0", "the token id of padding ([PAD]: 0 for BERT)"),
    Parameter(
        "max_rows",
        parse_int(0),
        0,
        "an integer >= 0",
        "rows per model call (0: the largest batch of the model's dims gears, else 8)",
    ),
)
DEFAULT_MAX_ROWS = 8


@dataclass(frozen=True)
class Call:
    """One model call: its padded inputs and, per request in it, (index, first row, rows, length)."""

    inputs: dict[str, np.ndarray]
    members: tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class TokenPadder:
    """How a model takes token sequences: its token inputs, the (batch, sequence) sizes it runs,
    and which outputs carry the sequence on axis 1."""

    inputs: tuple[str, ...]
    dtypes: Mapping[str, np.dtype]
    #: allowed (rows, sequence) pairs (dims gears); empty: any rows up to max_rows
    gears: tuple[tuple[int, int], ...]
    buckets: tuple[int, ...]
    max_rows: int
    per_token: frozenset[str]
    pad_token_id: int = 0

    @classmethod
    def build(cls, spec: ModelSpec, values: Mapping[str, object]) -> TokenPadder:
        names = tuple(t.name for t in spec.inputs)
        unknown = [n for n in names if n not in TOKEN_INPUTS]
        if IDS not in names or unknown:
            raise ConfigError(
                f"a text encoder takes {', '.join(TOKEN_INPUTS)} ({IDS} at least); this model takes {list(names)}"
            )
        for tensor in spec.inputs:
            if len(tensor.shape) != 2 or tensor.dtype not in ("INT64", "INT32"):
                raise ConfigError(
                    f"model input {tensor.name!r} is {tensor.dtype} {format_shape(tensor.shape)}; token inputs are "
                    "INT64 or INT32 [batch, sequence]"
                )
        gears = tuple(
            sorted({(g.shapes[IDS][0], g.shapes[IDS][1]) for g in spec.shape_gears if IDS in g.shapes}, key=_area)
        )
        fixed = spec.input(IDS).shape[1]
        buckets: tuple[int, ...]
        if gears:
            buckets = tuple(sorted({s for _, s in gears}))
        elif fixed > 0:
            buckets = (fixed,)
        else:
            buckets = tuple(sorted(set(values["sequence_buckets"])))  # type: ignore[call-overload]
        max_rows = int(values["max_rows"])  # type: ignore[call-overload]
        if not max_rows:
            max_rows = max(b for b, _ in gears) if gears else DEFAULT_MAX_ROWS
        # the sequence axis of an output is dynamic as the inputs' is (or, in a model of one fixed length, that length)
        length = -1 if fixed < 1 or gears else fixed
        per_token = frozenset(t.name for t in spec.outputs if len(t.shape) >= 2 and t.shape[1] == length)
        return cls(
            inputs=names,
            dtypes={t.name: t.numpy_dtype for t in spec.inputs},
            gears=gears,
            buckets=buckets,
            max_rows=max_rows,
            per_token=per_token,
            pad_token_id=int(values["pad_token_id"]),  # type: ignore[call-overload]
        )

    def checked(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request's token tensors, all of its ids' shape (missing ones filled); InputError
        naming the tensor otherwise."""
        if IDS not in inputs:
            raise InputError(f"the request has no {IDS}")
        ids = inputs[IDS]
        if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1 or ids.dtype.kind not in "iu":
            raise InputError(f"{IDS} is {ids.dtype} {list(ids.shape)}; expected integers [rows >= 1, length >= 1]")
        if ids.shape[0] > self.max_rows:
            raise InputError(f"{IDS} has {ids.shape[0]} rows; a request may carry at most {self.max_rows}")
        if ids.shape[1] > self.buckets[-1]:
            raise InputError(f"{IDS} has {ids.shape[1]} tokens; the model takes at most {self.buckets[-1]}")
        tensors = {}
        for name, fill in TOKEN_INPUTS.items():
            given = inputs.get(name)
            if given is not None and given.shape != ids.shape:
                raise InputError(f"{name} is {list(given.shape)}; it must have {IDS}'s shape {list(ids.shape)}")
            if name not in self.inputs:
                if given is not None and np.any(given != fill):
                    raise InputError(f"the model takes no {name}; send none (or all {fill})")
                continue
            tensors[name] = given if given is not None else np.full(ids.shape, fill, np.int64)
        return tensors

    def calls(self, requests: Sequence[dict[str, np.ndarray]]) -> list[Call]:
        """Checked requests -> model calls: ordered by length, at most ``max_rows`` rows each,
        padded as the module says."""
        order = sorted(range(len(requests)), key=lambda i: requests[i][IDS].shape[1])
        calls: list[Call] = []
        current: list[int] = []
        rows = 0
        for index in order:
            count = requests[index][IDS].shape[0]
            if current and rows + count > self.max_rows:
                calls.append(self._call(requests, current))
                current, rows = [], 0
            current.append(index)
            rows += count
        if current:
            calls.append(self._call(requests, current))
        return calls

    def _call(self, requests: Sequence[dict[str, np.ndarray]], indices: list[int]) -> Call:
        rows = sum(requests[i][IDS].shape[0] for i in indices)
        longest = max(requests[i][IDS].shape[1] for i in indices)
        padded_rows, length = self._size(rows, longest)
        inputs = {}
        for name in self.inputs:
            fill = self.pad_token_id if name == IDS else 0
            inputs[name] = np.full((padded_rows, length), fill, self.dtypes[name])
        members, row = [], 0
        for index in indices:
            tensors = requests[index]
            count, tokens = tensors[IDS].shape
            for name in self.inputs:
                inputs[name][row : row + count, :tokens] = tensors[name]
            members.append((index, row, count, tokens))
            row += count
        return Call(inputs, tuple(members))

    def _size(self, rows: int, longest: int) -> tuple[int, int]:
        length = next(b for b in self.buckets if b >= longest)
        if not self.gears:
            return rows, length
        fitting = [g for g in self.gears if g[0] >= rows and g[1] >= longest]
        if not fitting:  # more rows than any gear of this length: the caller splits by max_rows
            raise InputError(f"no gear of the model holds {rows} rows of {longest} tokens; its gears: {self.gears}")
        return fitting[0]

    def answers(self, call: Call, outputs: Mapping[str, np.ndarray]) -> dict[int, dict[str, np.ndarray]]:
        """A call's outputs -> each request's own rows, per-token outputs cut to its length."""
        found = {}
        for index, row, count, tokens in call.members:
            found[index] = {
                name: values[row : row + count, :tokens] if name in self.per_token else values[row : row + count]
                for name, values in outputs.items()
            }
        return found

    def run(self, batch: Sequence[Mapping[str, np.ndarray]], model: Model) -> list[dict[str, np.ndarray] | GEError]:
        """The requests of a batch -> each one's answer, or the error that refuses it (a bad
        request, or the failure of the model call it was in); ``model`` runs one call."""
        answers: list[dict[str, np.ndarray] | GEError | None] = [None] * len(batch)
        good: list[int] = []
        checked = []
        for index, inputs in enumerate(batch):
            try:
                checked.append(self.checked(inputs))
                good.append(index)
            except InputError as exc:
                answers[index] = exc
        for call in self.calls(checked):
            try:
                for position, answer in self.answers(call, model(call.inputs)).items():
                    answers[good[position]] = answer
            except GEError as exc:
                for position, *_ in call.members:
                    answers[good[position]] = exc
        return [answer if answer is not None else EngineError("no answer") for answer in answers]


Model = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


def _area(gear: tuple[int, int]) -> tuple[int, int, int]:
    return (gear[0] * gear[1], gear[1], gear[0])
