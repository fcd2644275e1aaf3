"""The request path between Triton glue and an engine: validate, batch, run, answer.

``Runner.submit`` takes a list of requests (numpy inputs plus a ``respond`` callback), runs the
``preprocess`` hook, validates each request alone, groups requests whose non-batch shapes
agree, plans chunks, gathers each chunk straight into a free slot's input buffers and hands it
to that slot's worker thread. The worker runs the engine, slices the outputs back per request,
runs ``postprocess`` and calls ``respond`` — exactly once per request, with outputs or an error.

``submit`` returns once every chunk is handed over; it blocks while all slots are busy, which
is the back-pressure that lets Triton's batcher build the next batch meanwhile.
Nothing here knows Triton.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .batching import Chunk, Profile, choose_profile, gather, plan_group, profiles_for, scatter
from .engines.base import Engine, Slot
from .errors import EngineError, GEError, InputError
from .specs import TensorSpec, dtype_name, format_shape

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class RequestInfo:
    """What the hooks may know about a request.

    A snapshot taken in ``execute``: the Triton request object itself may already be released
    when ``postprocess`` runs on a worker thread.
    """

    request_id: str = ""
    correlation_id: int | str = 0
    flags: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    requested_outputs: tuple[str, ...] = ()


Respond = Callable[[Arrays | None, GEError | None], None]


@dataclass
class Request:
    """One request as the runner sees it. ``respond(outputs, None)`` or ``respond(None, error)``."""

    info: RequestInfo
    inputs: Arrays
    respond: Respond


class Observer:
    """Receives what the runner measures. The default ignores everything."""

    def batch(self, rows: int, padding: int) -> None:
        """An engine call ran ``rows`` real rows plus ``padding`` rows of padding."""

    def phase(self, name: str, seconds: float) -> None:
        """Time spent in gather, host_to_device, execute, device_to_host or scatter."""

    def failure(self, kind: str) -> None:
        """A request failed: kind is input, engine, postprocess or internal."""


Hook = Callable[[dict[str, np.ndarray], RequestInfo], Mapping[str, np.ndarray]]


class _Tracked:
    """A request in flight: its parts still outstanding and whether it has been answered."""

    def __init__(self, request: Request, observer: Observer, log: Callable[[str], None]) -> None:
        self.request = request
        self.rows = 0
        self.parts_left = 0
        self.outputs: dict[str, np.ndarray] | None = None
        self._answered = False
        self._lock = threading.Lock()
        self._observer = observer
        self._log = log

    def _claim(self) -> bool:
        with self._lock:
            if self._answered:
                return False
            self._answered = True
            return True

    @property
    def answered(self) -> bool:
        return self._answered

    def fail(self, error: GEError, kind: str) -> None:
        if self._claim():
            self._observer.failure(kind)
            self._send(None, error)

    def succeed(self, outputs: Arrays) -> None:
        if self._claim():
            self._send(outputs, None)

    def _send(self, outputs: Arrays | None, error: GEError | None) -> None:
        try:
            self.request.respond(outputs, error)
        except Exception as exc:  # the client may be gone; nothing else can be done
            self._log(f"could not send the response of request {self.request.info.request_id!r}: {exc}")

    def add_part(self, source_start: int, outputs: Arrays) -> Arrays | None:
        """Record one part's outputs; return the request's outputs once every part is in."""
        with self._lock:
            if self.parts_left == 1 and self.outputs is None:
                self.parts_left = 0
                return outputs
            if self.outputs is None:
                self.outputs = {
                    name: np.empty((self.rows,) + array.shape[1:], array.dtype) for name, array in outputs.items()
                }
            for name, array in outputs.items():
                self.outputs[name][source_start : source_start + len(array)] = array
            self.parts_left -= 1
            return self.outputs if self.parts_left == 0 else None


class Runner:
    """Runs requests on an engine's slots. See the module docstring."""

    def __init__(
        self,
        engine: Engine,
        *,
        batching: bool,
        max_batch_size: int,
        output_types: Mapping[str, np.dtype],
        preprocess: Hook,
        postprocess: Hook,
        reject_nonfinite: bool = False,
        observer: Observer | None = None,
        log: Callable[[str], None] = lambda message: None,
    ) -> None:
        self._engine = engine
        self._inputs: tuple[TensorSpec, ...] = engine.spec.inputs
        self._batching = batching
        self._has_batch_axis = engine.spec.batch.kind != "none"
        self._max_batch_size = max_batch_size
        self._output_types = dict(output_types)
        self._preprocess = preprocess
        self._postprocess = postprocess
        self._reject_nonfinite = reject_nonfinite
        self._observer = observer or Observer()
        self._log = log
        self.profiles: tuple[Profile, ...] = profiles_for(engine.spec, batching, max_batch_size)
        self._free: queue.Queue[Slot] = queue.Queue()
        for slot in engine.slots:
            self._free.put(slot)
        self._workers = ThreadPoolExecutor(
            max_workers=len(engine.slots), initializer=engine.bind_thread, thread_name_prefix="ge-slot"
        )
        self._in_flight = 0
        self._idle = threading.Condition()

    # -- submit: runs on Triton's execute thread ---------------------------------------------

    def submit(self, requests: Sequence[Request]) -> None:
        """Validate, batch and dispatch ``requests``; every one is answered exactly once."""
        tracked = [_Tracked(r, self._observer, self._log) for r in requests]
        try:
            items = self._prepare_all(tracked)
            for members, shapes in self._groups(items):
                self._plan_and_dispatch(members, shapes, items, tracked)
        except Exception as exc:  # a bug here must still answer every request
            self._log(f"internal error while batching: {type(exc).__name__}: {exc}")
            for t in tracked:
                t.fail(GEError(f"internal error while batching: {type(exc).__name__}: {exc}"), "internal")

    def _prepare_all(self, tracked: list[_Tracked]) -> dict[int, dict[str, np.ndarray]]:
        items = {}
        for index, t in enumerate(tracked):
            try:
                items[index] = self._prepare(t)
            except InputError as exc:
                t.fail(exc, "input")
            except Exception as exc:
                t.fail(InputError(f"preprocess failed: {type(exc).__name__}: {exc}"), "input")
        return items

    def _prepare(self, t: _Tracked) -> dict[str, np.ndarray]:
        arrays = self._preprocess(dict(t.request.inputs), t.request.info)
        if not isinstance(arrays, Mapping):
            raise InputError(f"preprocess returned {type(arrays).__name__}; it must return a dict of arrays")
        item = {spec.name: self._validated(spec, arrays) for spec in self._inputs}
        if self._has_batch_axis:
            rows = {name: array.shape[0] for name, array in item.items()}
            if len(set(rows.values())) > 1:
                listed = ", ".join(f"{n} {r}" for n, r in rows.items())
                raise InputError(f"inputs disagree on the batch size (axis 0): {listed}")
            t.rows = next(iter(rows.values()))
            if self._batching and t.rows > self._max_batch_size:
                raise InputError(f"batch size {t.rows} is above max_batch_size {self._max_batch_size}")
        return item

    def _validated(self, spec: TensorSpec, arrays: Mapping[str, Any]) -> np.ndarray:
        if spec.name not in arrays or arrays[spec.name] is None:
            raise InputError(f"missing input {spec.name!r} ({spec.dtype} {format_shape(self._client_shape(spec))})")
        array = np.asarray(arrays[spec.name])
        expected = spec.numpy_dtype
        if array.dtype != expected and not (spec.dtype == "BYTES" and array.dtype.kind in "OSU"):
            raise InputError(f"input {spec.name!r} has data type {dtype_name(array.dtype)}; the model expects {spec.dtype}")
        declared = spec.shape[1:] if self._has_batch_axis else spec.shape
        shape = array.shape[1:] if self._has_batch_axis else array.shape
        if self._has_batch_axis and array.ndim == 0:
            raise InputError(f"input {spec.name!r} is a scalar; the model expects {format_shape(self._client_shape(spec))}")
        if len(shape) != len(declared) or any(d not in (-1, s) for s, d in zip(shape, declared)):
            raise InputError(
                f"input {spec.name!r} has shape {format_shape(array.shape)}; "
                f"the model expects {format_shape(self._client_shape(spec))}"
            )
        if array.size == 0:
            raise InputError(f"input {spec.name!r} is empty (shape {format_shape(array.shape)})")
        if self._reject_nonfinite and array.dtype.kind == "f" and not np.isfinite(array).all():
            raise InputError(f"input {spec.name!r} contains NaN or Inf, which parameter reject_nonfinite forbids")
        return array

    def _client_shape(self, spec: TensorSpec) -> tuple[int, ...]:
        """The shape a client sends: the batch axis shown as -1 when batching."""
        return ((-1,) + spec.shape[1:]) if self._batching else spec.shape

    def _groups(self, items: dict[int, dict[str, np.ndarray]]):
        """(members, non-batch shapes) of requests that may share chunks."""
        if not self._batching:
            for index, item in items.items():
                yield [index], self._non_batch_shapes(item)
            return
        groups: dict[tuple, list[int]] = {}
        for index, item in items.items():
            key = tuple(sorted(self._non_batch_shapes(item).items()))
            groups.setdefault(key, []).append(index)
        for key, members in groups.items():
            yield members, dict(key)

    def _non_batch_shapes(self, item: Mapping[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
        return {name: a.shape[1:] if self._has_batch_axis else a.shape for name, a in item.items()}

    def _plan_and_dispatch(self, members, shapes, items, tracked) -> None:
        try:
            profile = choose_profile(self.profiles, shapes)
        except InputError as exc:
            for m in members:
                tracked[m].fail(exc, "input")
            return
        rows = {m: max(tracked[m].rows, 1) for m in members}
        chunks = plan_group(members, rows, shapes, profile)
        for chunk in chunks:
            for part in chunk.parts:
                tracked[part.item].parts_left += 1
        for chunk in chunks:
            self._dispatch(chunk, items, tracked)

    def _dispatch(self, chunk: Chunk, items, tracked: list[_Tracked]) -> None:
        if all(tracked[p.item].answered for p in chunk.parts):
            return
        slot = self._free.get()
        started = time.perf_counter()
        try:
            gather(chunk, items, slot.inputs(chunk.shapes))
        except Exception as exc:
            self._free.put(slot)
            self._fail_chunk(chunk, tracked, EngineError(f"could not stage the batch: {exc}"))
            return
        self._observer.phase("gather", time.perf_counter() - started)
        with self._idle:
            self._in_flight += 1
        self._workers.submit(self._run, slot, chunk, tracked)

    # -- run: on the slot's worker thread ---------------------------------------------------

    def _run(self, slot: Slot, chunk: Chunk, tracked: list[_Tracked]) -> None:
        try:
            try:
                outputs = slot.run()
            except EngineError as exc:
                self._fail_chunk(chunk, tracked, exc)
                return
            except Exception as exc:
                self._fail_chunk(chunk, tracked, EngineError(f"engine failed: {type(exc).__name__}: {exc}"))
                return
            times = slot.last_times
            self._observer.phase("host_to_device", times.host_to_device)
            self._observer.phase("execute", times.execute)
            self._observer.phase("device_to_host", times.device_to_host)
            self._observer.batch(chunk.rows, chunk.padding)
            started = time.perf_counter()
            self._answer(chunk, outputs, tracked)
            self._observer.phase("scatter", time.perf_counter() - started)
        finally:
            self._free.put(slot)
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _answer(self, chunk: Chunk, outputs: Arrays, tracked: list[_Tracked]) -> None:
        try:
            pieces = scatter(chunk, outputs)
        except ValueError as exc:
            self._fail_chunk(chunk, tracked, EngineError(str(exc)))
            return
        for part, part_outputs in pieces:
            t = tracked[part.item]
            if t.answered:
                continue
            complete = t.add_part(part.source_start, part_outputs)
            if complete is not None:
                self._finish(t, complete)

    def _finish(self, t: _Tracked, outputs: Arrays) -> None:
        try:
            result = self._postprocess(dict(outputs), t.request.info)
            t.succeed(self._selected(result, t.request.info))
        except InputError as exc:
            t.fail(exc, "postprocess")
        except Exception as exc:
            t.fail(GEError(f"postprocess failed: {type(exc).__name__}: {exc}"), "postprocess")

    def _selected(self, outputs: Mapping[str, Any], info: RequestInfo) -> dict[str, np.ndarray]:
        """The requested outputs, in the config's data types."""
        wanted = info.requested_outputs or tuple(self._output_types)
        missing = [name for name in wanted if name not in outputs]
        if missing:
            raise GEError(f"output {missing[0]!r} was requested but the model produced only {sorted(outputs)}")
        return {name: self._typed(name, outputs[name]) for name in wanted}

    def _typed(self, name: str, value: Any) -> np.ndarray:
        array = np.asarray(value)
        target = self._output_types.get(name)
        if target is None or array.dtype == target:
            return array
        if target == np.dtype(object):
            return array.astype(object)
        if np.can_cast(array.dtype, target, casting="same_kind"):
            return array.astype(target)
        raise GEError(f"output {name!r} has data type {dtype_name(array.dtype)}; the config declares {dtype_name(target)}")

    def _fail_chunk(self, chunk: Chunk, tracked: list[_Tracked], error: GEError) -> None:
        for part in chunk.parts:
            tracked[part.item].fail(error, "engine")

    # -- lifecycle ------------------------------------------------------------------------

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no batch is in flight; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self) -> None:
        """Finish what is in flight and stop the workers."""
        self.drain()
        self._workers.shutdown(wait=True)
