"""The request path between Triton glue and an engine: validate, batch, run, answer.

``Runner.submit`` takes a list of requests (numpy inputs plus a ``respond`` callback), runs the
``preprocess`` hook, validates each request alone, groups requests whose non-batch shapes
agree, plans chunks, gathers each chunk straight into a free slot's input buffers and hands it
to that slot's worker thread. The worker runs the engine, slices the outputs back per request,
runs ``postprocess`` and calls ``respond`` — exactly once per request, with outputs or an error.

``submit`` returns once every chunk is handed over; it blocks while all slots are busy, which
is the back-pressure that lets Triton's batcher build the next batch meanwhile. For stateful
models it returns only when its requests are answered, since a sequence's next step needs
this step's state. Nothing here knows Triton.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ge_python_backend.serving.batching import Chunk, Profile, choose_profile, gather, plan_group, profiles_for, scatter
from ge_python_backend.engines.base import Engine, Slot
from ge_python_backend.errors import EngineError, GEError, InputError
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.sequences import SequenceStates
from ge_python_backend.specs import TensorSpec, dtype_name, format_shape, shape_fits

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

    def in_flight(self, batches: int) -> None:
        """The number of batches running on slots changed."""

    def sequences(self, active: int) -> None:
        """The number of sequences with stored state changed."""

    def out_of_service(self, reason: str) -> None:
        """The engine failed fatally (the device is gone): every later request is refused."""


class Observers(Observer):
    """Several observers as one. An observer that raises is logged and never stops the
    request path (a failed metric update must not leave a request unanswered)."""

    def __init__(self, *observers: Observer, log: Callable[[str], None] = lambda message: None) -> None:
        self._observers = observers
        self._log = log

    def _each(self, method: str, *args: Any) -> None:
        for observer in self._observers:
            try:
                getattr(observer, method)(*args)
            except Exception as exc:
                self._log(f"observer {type(observer).__name__}.{method} failed: {type(exc).__name__}: {exc}")

    def batch(self, rows: int, padding: int) -> None:
        self._each("batch", rows, padding)

    def phase(self, name: str, seconds: float) -> None:
        self._each("phase", name, seconds)

    def failure(self, kind: str) -> None:
        self._each("failure", kind)

    def in_flight(self, batches: int) -> None:
        self._each("in_flight", batches)

    def sequences(self, active: int) -> None:
        self._each("sequences", active)

    def out_of_service(self, reason: str) -> None:
        self._each("out_of_service", reason)


Hook = Callable[[dict[str, np.ndarray], RequestInfo], Mapping[str, np.ndarray]]


class _Tracked:
    """A request in flight: its parts still outstanding and whether it has been answered."""

    def __init__(
        self,
        request: Request,
        observer: Observer,
        log: Callable[[str], None],
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.request = request
        self.rows = 0
        self.parts_left = 0
        self.own_outputs = False  # copy outputs out of slot memory (the slot may run again first)
        self.outputs: dict[str, np.ndarray] | None = None
        #: set once the answer has been handed to ``respond`` (not merely decided)
        self.answered = threading.Event()
        self._claimed = False
        self._lock = threading.Lock()
        self._observer = observer
        self._log = log
        self._on_failure = on_failure

    @property
    def claimed(self) -> bool:
        """An answer (outputs or an error) has been decided; nothing more is done for it."""
        return self._claimed

    def _claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def fail(self, error: GEError, kind: str) -> None:
        if self._claim():
            self._on_failure()
            self._observer.failure(kind)  # before the answer: a client that got it can read the metric
            self._send(None, error)

    def succeed(self, outputs: Arrays) -> None:
        if self._claim():
            self._send(outputs, None)

    def _send(self, outputs: Arrays | None, error: GEError | None) -> None:
        try:
            self.request.respond(outputs, error)
        except Exception as exc:  # the client may be gone; nothing else can be done
            self._log(f"could not send the response of request {self.request.info.request_id!r}: {exc}")
        finally:
            self.answered.set()

    def add_part(self, source_start: int, outputs: Arrays) -> Arrays | None:
        """Record one part's outputs; return the request's outputs once every part is in."""
        with self._lock:
            if self.parts_left == 1 and self.outputs is None:
                self.parts_left = 0
                return {name: array.copy() for name, array in outputs.items()} if self.own_outputs else outputs
            if self.outputs is None:
                self.outputs = {
                    name: np.empty((self.rows,) + array.shape[1:], array.dtype) for name, array in outputs.items()
                }
            for name, array in outputs.items():
                self.outputs[name][source_start : source_start + len(array)] = array
            self.parts_left -= 1
            return self.outputs if self.parts_left == 0 else None


@dataclass
class _Item:
    """A validated request: batch-first arrays of batched inputs, values of unbatched ones."""

    batched: dict[str, np.ndarray]
    shared: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.batched[name]


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
        layout: Layout | None = None,
        sequences: SequenceStates | None = None,
        reject_nonfinite: bool = False,
        observer: Observer | None = None,
        log: Callable[[str], None] = lambda message: None,
    ) -> None:
        self._engine = engine
        self._layout = layout or Layout()
        self._layout.check(engine.spec)
        self._inputs: tuple[TensorSpec, ...] = engine.spec.inputs
        self._spec = self._layout.batch_first_spec(engine.spec)
        self._batching = batching
        self._has_batch_axis = self._spec.batch.kind != "none"
        self._max_batch_size = max_batch_size
        self._output_types = dict(output_types)
        self._preprocess = preprocess
        self._postprocess = postprocess
        self._sequences = sequences
        self._reject_nonfinite = reject_nonfinite
        self._observer = Observers(observer or Observer(), log=log)
        self._log = log
        # Per engine input, computed once: its batch axis and the shape a request must have.
        self._input_axes = {spec.name: self._layout.axis(spec.name) for spec in self._inputs}
        self._client_shapes = {spec.name: self._client_shape(spec) for spec in self._inputs}
        self._aliasing_outputs = engine.outputs_alias_slot_memory
        self.profiles: tuple[Profile, ...] = profiles_for(self._spec, batching, max_batch_size)
        self._free: queue.Queue[Slot] = queue.Queue()
        for slot in engine.slots:
            self._free.put(slot)
        self._workers = ThreadPoolExecutor(
            max_workers=len(engine.slots), initializer=engine.bind_thread, thread_name_prefix="ge-slot"
        )
        self._bound = threading.local()
        self._in_flight = 0
        self._idle = threading.Condition()
        self.out_of_service: EngineError | None = None

    # -- submit: runs on Triton's execute thread ---------------------------------------------

    def submit(self, requests: Sequence[Request], wait: bool = False) -> None:
        """Validate, batch and dispatch ``requests``; every one is answered exactly once.

        With ``wait`` (and always for stateful models, whose next step needs this one's state)
        return only once every request is answered. Answers may then be read after later
        batches of the same call have reused a slot, so they own their data whenever the call
        runs more than one batch.
        """
        if self.out_of_service is not None:
            for request in requests:
                self._track(request).fail(self.out_of_service, "engine")
            return
        if self._sequences is None:
            self._submit([self._track(r) for r in requests], wait=wait, kept=wait, other_batches=False)
            return
        self._sequences.expire()
        waves = _waves(requests)
        for wave in waves:
            self._submit([self._track(r) for r in wave], wait=True, kept=wait, other_batches=len(waves) > 1)
        self._observer.sequences(len(self._sequences))

    def _track(self, request: Request) -> _Tracked:
        """A request in flight; a failed step of a sequence drops that sequence's state (its
        next step must start over rather than run on stale state)."""
        forget = (lambda: None) if self._sequences is None else partial(
            self._sequences.forget, request.info.correlation_id
        )
        return _Tracked(request, self._observer, self._log, forget)

    def _submit(self, tracked: list[_Tracked], wait: bool, kept: bool, other_batches: bool) -> None:
        """``kept``: answers are read after this call returns, so with several batches in the
        call (here, or ``other_batches`` elsewhere in it) they must own their data."""
        try:
            items = self._prepare_all(tracked)
            chunks = [c for members, shapes in self._groups(items) for c in self._plan(members, shapes, tracked)]
            if kept and self._aliasing_outputs and (other_batches or len(chunks) > 1):
                for t in tracked:
                    t.own_outputs = True
            inline = wait and (len(chunks) == 1 or len(self._engine.slots) == 1)
            for chunk in chunks:
                self._dispatch(chunk, items, tracked, inline)
        except Exception as exc:  # a bug here must still answer every request
            self._log(f"internal error while batching: {type(exc).__name__}: {exc}")
            for t in tracked:
                t.fail(GEError(f"internal error while batching: {type(exc).__name__}: {exc}"), "internal")
        if wait:
            for t in tracked:
                t.answered.wait()

    def _prepare_all(self, tracked: list[_Tracked]) -> dict[int, _Item]:
        items = {}
        for index, t in enumerate(tracked):
            try:
                items[index] = self._prepare(t)
            except InputError as exc:
                t.fail(exc, "input")
            except Exception as exc:  # a crash in the hook (or here) is the server's fault, not the client's
                t.fail(GEError(f"preprocess failed: {type(exc).__name__}: {exc}"), "internal")
        return items

    def _prepare(self, t: _Tracked) -> _Item:
        info = t.request.info
        arrays = self._preprocess(dict(t.request.inputs), info)
        if not isinstance(arrays, Mapping):
            raise InputError(f"preprocess returned {type(arrays).__name__}; it must return a dict of arrays")
        if self._sequences is not None:
            arrays = self._sequences.inject(info.correlation_id, info.flags, dict(arrays))
        item = _Item({}, {})
        for spec in self._inputs:
            array = self._validated(spec, arrays)
            if self._input_axes[spec.name] is None:
                item.shared[spec.name] = self._shared_value(spec, array)
            else:
                item.batched[spec.name] = self._layout.to_batch_first(spec.name, array)
        if self._has_batch_axis:
            rows = {name: array.shape[0] for name, array in item.batched.items()}
            if len(set(rows.values())) > 1:
                listed = ", ".join(f"{n} {r}" for n, r in rows.items())
                raise InputError(f"inputs disagree on the batch size: {listed}")
            t.rows = next(iter(rows.values()))
            if self._batching and t.rows > self._max_batch_size:
                raise InputError(f"batch size {t.rows} is above max_batch_size {self._max_batch_size}")
        return item

    def _validated(self, spec: TensorSpec, arrays: Mapping[str, Any]) -> np.ndarray:
        client_shape = self._client_shapes[spec.name]
        if spec.name not in arrays or arrays[spec.name] is None:
            raise InputError(f"missing input {spec.name!r} ({spec.dtype} {format_shape(client_shape)})")
        array = np.asarray(arrays[spec.name])
        expected = spec.numpy_dtype
        if array.dtype != expected and not (spec.dtype == "BYTES" and array.dtype.kind in "OSU"):
            raise InputError(f"input {spec.name!r} has data type {dtype_name(array.dtype)}; the model expects {spec.dtype}")
        if not shape_fits(array.shape, client_shape):
            raise InputError(
                f"input {spec.name!r} has shape {format_shape(array.shape)}; the model expects {format_shape(client_shape)}"
            )
        if array.size == 0:
            raise InputError(f"input {spec.name!r} is empty (shape {format_shape(array.shape)})")
        if self._reject_nonfinite and array.dtype.kind == "f" and not np.isfinite(array).all():
            raise InputError(f"input {spec.name!r} contains NaN or Inf, which parameter reject_nonfinite forbids")
        return array

    def _client_shape(self, spec: TensorSpec) -> tuple[int, ...]:
        """The shape a request must have: the batch axis any size (-1) when the model has one;
        an unbatched input of a batching model comes with a leading batch axis of its own."""
        axis = self._layout.axis(spec.name)
        if axis is None:
            return ((-1,) + spec.shape) if self._batching else spec.shape
        if not self._has_batch_axis:
            return spec.shape
        shape = list(spec.shape)
        shape[axis] = -1
        return tuple(shape)

    def _shared_value(self, spec: TensorSpec, array: np.ndarray) -> np.ndarray:
        if not self._batching:
            return array
        if not (array == array[:1]).all():
            raise InputError(f"unbatched input {spec.name!r} must be the same for every row of the request")
        return array[0]

    def _groups(self, items: dict[int, _Item]):
        """(members, non-batch shapes) of requests that may share chunks: equal non-batch
        shapes and equal values of unbatched inputs."""
        if not self._batching:
            for index, item in items.items():
                yield [index], self._non_batch_shapes(item)
            return
        groups: dict[tuple, list[int]] = {}
        for index, item in items.items():
            shapes = tuple(sorted(self._non_batch_shapes(item).items()))
            shared = tuple((n, v.dtype.str, v.shape, _value_key(v)) for n, v in sorted(item.shared.items()))
            groups.setdefault((shapes, shared), []).append(index)
        for (shapes, _), members in groups.items():
            yield members, dict(shapes)

    def _non_batch_shapes(self, item: _Item) -> dict[str, tuple[int, ...]]:
        return {name: a.shape[1:] if self._has_batch_axis else a.shape for name, a in item.batched.items()}

    def _plan(self, members, shapes, tracked) -> list[Chunk]:
        """The chunks of one group (its requests fail alone when no profile fits them)."""
        try:
            profile = choose_profile(self.profiles, shapes)
        except InputError as exc:
            for m in members:
                tracked[m].fail(exc, "input")
            return []
        rows = {m: max(tracked[m].rows, 1) for m in members}
        chunks = plan_group(members, rows, shapes, profile)
        for chunk in chunks:
            for part in chunk.parts:
                tracked[part.item].parts_left += 1
        return chunks

    def _stage(self, slot: Slot, chunk: Chunk, items: Mapping[int, _Item]) -> None:
        """Gather ``chunk`` into ``slot``'s input buffers (unbatched inputs: the shared value)."""
        shared = items[chunk.parts[0].item].shared
        shapes = {n: self._layout.engine_shape(n, s) for n, s in chunk.shapes.items()}
        shapes.update((n, v.shape) for n, v in shared.items())
        buffers = slot.inputs(shapes)
        for name, value in shared.items():
            np.copyto(buffers[name], value, casting="no")
        batch_first = {n: self._layout.to_batch_first(n, buffers[n]) for n in chunk.shapes}
        gather(chunk, items, batch_first)

    def _dispatch(self, chunk: Chunk, items, tracked: list[_Tracked], inline: bool) -> None:
        """Gather ``chunk`` into a free slot and run it on the slot's worker thread, or right
        here when the caller waits anyway and nothing could run beside it (no thread hand-off)."""
        if all(tracked[p.item].claimed for p in chunk.parts):
            return
        if self.out_of_service is not None:  # an earlier chunk of this call lost the device
            self._fail_chunk(chunk, tracked, self.out_of_service)
            return
        slot = self._free.get()
        started = time.perf_counter()
        try:
            self._stage(slot, chunk, items)
        except Exception as exc:
            self._free.put(slot)
            self._fail_chunk(chunk, tracked, EngineError(f"could not stage the batch: {exc}"))
            return
        self._observer.phase("gather", time.perf_counter() - started)
        with self._idle:
            self._in_flight += 1
            self._observer.in_flight(self._in_flight)
        if inline:
            self._run(slot, chunk, tracked, bind=True)
            return
        try:
            self._workers.submit(self._run, slot, chunk, tracked)
        except RuntimeError as exc:  # the pool is shut down (the model is being unloaded)
            self._release(slot)
            self._fail_chunk(chunk, tracked, EngineError(f"the model is shutting down: {exc}"))

    def _bind_this_thread(self) -> None:
        if not getattr(self._bound, "done", False):
            self._engine.bind_thread()
            self._bound.done = True

    # -- run: on the slot's worker thread ---------------------------------------------------

    def _run(self, slot: Slot, chunk: Chunk, tracked: list[_Tracked], bind: bool = False) -> None:
        try:
            if bind:
                self._bind_this_thread()
            try:
                outputs = slot.run()
            except EngineError as exc:
                if exc.fatal:
                    self._stop_service(exc)
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
        except Exception as exc:  # a bug here must still answer every request of the chunk
            self._log(f"internal error around the batch: {type(exc).__name__}: {exc}")
            self._fail_chunk(chunk, tracked, GEError(f"internal error: {type(exc).__name__}: {exc}"), "internal")
        finally:
            self._release(slot)

    def _release(self, slot: Slot) -> None:
        self._free.put(slot)
        with self._idle:
            self._in_flight -= 1
            self._observer.in_flight(self._in_flight)
            self._idle.notify_all()

    def _answer(self, chunk: Chunk, outputs: Arrays, tracked: list[_Tracked]) -> None:
        try:
            batch_first = {n: self._layout.to_batch_first(n, a) for n, a in outputs.items()}
            pieces = scatter(chunk, batch_first)
        except ValueError as exc:
            self._fail_chunk(chunk, tracked, EngineError(str(exc)))
            return
        for part, part_outputs in pieces:
            t = tracked[part.item]
            if t.claimed:
                continue
            complete = t.add_part(part.source_start, part_outputs)
            if complete is not None:
                self._finish(t, {n: self._layout.from_batch_first(n, a) for n, a in complete.items()})

    def _finish(self, t: _Tracked, outputs: Arrays) -> None:
        info = t.request.info
        try:
            if self._sequences is not None:
                self._sequences.capture(info.correlation_id, info.flags, outputs)
            result = self._postprocess(dict(outputs), info)
            t.succeed(self._selected(result, info))
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

    def _stop_service(self, cause: EngineError) -> None:
        with self._idle:
            if self.out_of_service is not None:
                return
            self.out_of_service = EngineError(
                f"the model is out of service after a fatal engine failure ({cause}); reload it once the device "
                "is back",
                fatal=True,
            )
        self._log(f"engine failed fatally, refusing every request from now on: {cause}")
        self._observer.out_of_service(str(cause))

    def _fail_chunk(self, chunk: Chunk, tracked: list[_Tracked], error: GEError, kind: str = "engine") -> None:
        for part in chunk.parts:
            tracked[part.item].fail(error, kind)

    # -- lifecycle ------------------------------------------------------------------------

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no batch is in flight; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self) -> None:
        """Finish what is in flight and stop the workers."""
        self.drain()
        self._workers.shutdown(wait=True)


def _waves(requests: Sequence[Request]) -> list[list[Request]]:
    """Split requests so that no correlation ID appears twice in a wave (steps stay in order)."""
    waves: list[list[Request]] = []
    seen: list[set] = []
    for request in requests:
        cid = request.info.correlation_id
        for wave, ids in zip(waves, seen):
            if cid not in ids:
                wave.append(request)
                ids.add(cid)
                break
        else:
            waves.append([request])
            seen.append({cid})
    return waves


def _value_key(value: np.ndarray) -> tuple | bytes:
    """A hashable key equal for equal values (object arrays compare their elements, not pointers)."""
    return tuple(value.ravel().tolist()) if value.dtype == np.dtype(object) else value.tobytes()
