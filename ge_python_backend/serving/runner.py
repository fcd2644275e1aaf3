"""The request path between Triton glue and an engine: validate, batch, run, answer.

``Runner.submit`` takes a list of requests (numpy inputs plus a ``respond`` callback), prepares
each one alone (``validation``), groups requests whose non-batch shapes agree, plans chunks
(``batching``), gathers each chunk straight into a free slot's input buffers and hands it to
that slot's worker thread. The worker runs the engine, slices the outputs back per request,
runs ``postprocess`` and calls ``respond`` — exactly once per request (``tracking``).

Requests of a signature seen before may come through the fast lane instead (``lane``: known
signatures, cached plans, one-pass answers); both kinds of batch run on the same slots and
workers, and whatever the lane cannot do it hands to the general path.

``submit`` returns once every chunk is handed over; it blocks while all slots are busy, which
is the back-pressure that lets Triton's batcher build the next batch meanwhile. For stateful
models it returns only when its requests are answered, since a sequence's next step needs
this step's state. Nothing here knows Triton. Unexpected exceptions are logged once with their
traceback (stdlib ``logging``; GEModel bridges it to tritonserver's log); the client gets one line.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from ge_python_backend.engines.base import Engine, Slot
from ge_python_backend.errors import ContractError, EngineError, GEError, InputError
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.batching import Chunk, Profile, choose_profile, gather, plan_group, profiles_for, scatter
from ge_python_backend.serving.lane import Item, Lane, LaneBatch, Replies, refusal
from ge_python_backend.serving.observers import FailureKind, Observer, Observers, Phase
from ge_python_backend.serving.outputs import DeclaredTensor, OutputContract
from ge_python_backend.serving.requests import Arrays, Hook, Request, hook_location
from ge_python_backend.serving.sequences import SequenceStates
from ge_python_backend.serving.tracking import Answers, Tracked
from ge_python_backend.serving.validation import Prepared, Validator
from ge_python_backend.specs import ModelSpec

LOG = logging.getLogger(__name__)
#: distinct non-batch shape sets whose profile is remembered
_PROFILE_CACHE = 1024
#: seconds after an idle sequence's timeout at which the expiry timer looks (its clock is strict)
_EXPIRY_SLACK = 0.005


class Runner:
    """Runs requests on an engine's slots. See the module docstring."""

    def __init__(
        self,
        engine: Engine,
        *,
        batching: bool,
        max_batch_size: int,
        outputs: Sequence[DeclaredTensor],
        preprocess: Hook | None,
        postprocess: Hook | None,
        layout: Layout | None = None,
        sequences: SequenceStates | None = None,
        reject_nonfinite: bool = False,
        observers: Sequence[Observer] = (),
        spec: ModelSpec | None = None,
    ) -> None:
        """``outputs``: the config's outputs, what every answer is checked against. ``spec``: the
        engine's model as the config completes it (tensors of open rank get the config's rank,
        ``matching.refine_spec``); default the engine's own."""
        self._engine = engine
        model = spec or engine.spec
        self._layout = (layout or Layout()).with_model(model)
        self._layout.check(model)
        self._spec = self._layout.batch_first_spec(model)
        self._whole = self._layout.whole_outputs(model)
        self._batching = batching
        self._postprocess = postprocess
        self._sequences = sequences
        self._observer = Observers(observers)
        self._validator = Validator(
            model,
            self._layout,
            batching=batching,
            max_batch_size=max_batch_size,
            preprocess=preprocess,
            sequences=sequences,
            reject_nonfinite=reject_nonfinite,
            utf8_strings=engine.utf8_strings,
        )
        self._outputs = OutputContract(outputs, batching=batching, source="postprocess" if postprocess else "the model")
        self._hook_locations = {
            name: hook_location(hook)
            for name, hook in (("preprocess", preprocess), ("postprocess", postprocess))
            if hook
        }
        self._aliasing_outputs = engine.outputs_alias_slot_memory
        #: why this model cannot use the fast lane ("" when it can)
        self.lane_refusal = refusal(
            model,
            self._layout,
            outputs,
            hooks=list(self._hook_locations),
            sequences=sequences is not None,
            reject_nonfinite=reject_nonfinite,
            engine_settings=engine.settings_without_parameters,
        )
        self.profiles: tuple[Profile, ...] = profiles_for(self._spec, batching, max_batch_size, self._whole)
        #: non-batch shapes -> the profile that runs them (or the InputError saying none does)
        self._profile_for: dict[tuple, Profile | InputError] = {}
        self._free: queue.SimpleQueue[Slot] = queue.SimpleQueue()  # C-implemented: a batch takes and returns one
        for slot in engine.slots:
            self._free.put(slot)
        #: the fast lane, when the model can use it
        self.lane = (
            None
            if self.lane_refusal
            else Lane(
                self._validator,
                model,
                self.profiles,
                self._outputs,
                outputs,
                batching=batching,
                reads_parameters=engine.reads_parameters,
                adopt=self._adopted,
            )
        )
        self._workers = ThreadPoolExecutor(
            max_workers=len(engine.slots), initializer=engine.bind_thread, thread_name_prefix="ge-slot"
        )
        self._bound = threading.local()
        self._in_flight = 0
        self._idle = threading.Condition()
        self.out_of_service: EngineError | None = None
        #: set by close: no new batch starts, the sequence expiry timer stops
        self._closing = threading.Event()
        if sequences is not None:
            threading.Thread(target=self._expire_idle, name="ge-sequence-expiry", daemon=True).start()

    # -- submit: runs on Triton's execute thread ---------------------------------------------

    def submit(
        self,
        requests: Sequence[Request],
        wait: bool = False,
        known: Sequence[Item] = (),
        replies: Replies | None = None,
    ) -> None:
        """Validate, batch and dispatch ``requests``, and ``known`` through the fast lane (answered
        through ``replies``); every one is answered exactly once.

        With ``wait`` (and always for stateful models, whose next step needs this one's state)
        return only once every request is answered. Answers may then be read after later
        batches of the same call have reused a slot, so they own their data whenever the call
        runs more than one batch.
        """
        lane_batches: Sequence[LaneBatch] = ()
        answers = Answers(len(requests) + len(known)) if wait and self._sequences is None else None
        if known:
            assert self.lane is not None and replies is not None, "known requests need the lane and replies"
            try:
                if self.out_of_service is not None:
                    raise self.out_of_service
                lane_batches, declined = self.lane.batches(known, replies, answers)
            except Exception as exc:  # out of service, or a bug in the lane: the general path answers
                if exc is not self.out_of_service:
                    LOG.exception("the fast lane could not batch %d request(s)", len(known))
                declined = [self.lane.request(replies, item) for item in known]
            requests = [*requests, *declined]
        if self.out_of_service is not None:
            for request in requests:
                self._track(request).fail(self.out_of_service, FailureKind.ENGINE)
            return
        if self._sequences is None:
            tracked = [self._track(r, answers) for r in requests]
            self._submit(tracked, answers, kept=wait, other_batches=False, lane_batches=lane_batches)
            return
        self._sequences.expire()
        waves = _waves(requests)
        for wave in waves:
            answers = Answers(len(wave))
            self._submit([self._track(r, answers) for r in wave], answers, kept=wait, other_batches=len(waves) > 1)
        self._observer.sequences(len(self._sequences))

    def _track(self, request: Request, answers: Answers | None = None) -> Tracked:
        """A request in flight; a failed step of a sequence drops that sequence's state (its
        next step must start over rather than run on stale state)."""
        if self._sequences is None:
            return Tracked(request, self._observer, answers=answers)
        forget = self._sequences.forget
        cid = request.info.correlation_id
        return Tracked(request, self._observer, lambda error: forget(cid, str(error)), answers)

    def _submit(
        self,
        tracked: list[Tracked],
        answers: Answers | None,
        kept: bool,
        other_batches: bool,
        lane_batches: Sequence[LaneBatch] = (),
    ) -> None:
        """Returns once every request is answered when ``answers`` counts them. ``kept``: answers
        are read after this call returns, so with several batches in the call (here, or
        ``other_batches`` elsewhere in it) they must own their data."""
        wait = answers is not None
        batches: list[_Batch] = list(lane_batches)
        try:
            items = self._prepare_all(tracked)
            for members, shapes in self._groups(items):
                batches += (_TrackedBatch(self, c, items, tracked) for c in self._plan(members, shapes, tracked))
            if kept and self._aliasing_outputs and (other_batches or len(batches) > 1):
                for t in tracked:
                    t.own_outputs = True
                for lane_batch in lane_batches:
                    lane_batch.copy = True
            inline = wait and (len(batches) == 1 or len(self._engine.slots) == 1)
            for batch in batches:
                self._dispatch(batch, inline)
        except Exception as exc:  # a bug here must still answer every request
            LOG.exception("internal error while batching %d request(s)", len(tracked) + len(lane_batches))
            error = GEError(f"internal error while batching: {type(exc).__name__}: {exc}")
            for t in tracked:
                t.fail(error, FailureKind.INTERNAL)
            for batch in lane_batches:
                batch.fail(error, FailureKind.INTERNAL)
        if answers is not None:
            answers.wait()

    def _prepare_all(self, tracked: list[Tracked]) -> dict[int, Prepared]:
        items = {}
        prepare, settings_always = self._validator.prepare, self._engine.settings_without_parameters
        for index, t in enumerate(tracked):
            info = t.request.info
            try:
                prepared = prepare(t.request.inputs, info)
                if info.parameters or settings_always:  # else batch_settings is None by contract
                    shapes = {n: a.shape for n, a in (*prepared.batched.items(), *prepared.shared.items())}
                    prepared.settings = self._engine.batch_settings(info.parameters, shapes, info.request_id)
                items[index] = prepared
                t.rows = prepared.rows
                t.request_rows = prepared.request_rows
            except InputError as exc:
                t.fail(exc, FailureKind.INPUT)
            except ContractError as exc:  # the hook's bug, not the client's
                self._log_contract(exc, "preprocess", info.request_id)
                t.fail(exc, FailureKind.INTERNAL)
            except Exception as exc:  # a crash in the hook (or here) is the server's fault, not the client's
                LOG.exception("preprocess failed for request %r", info.request_id)
                t.fail(GEError(f"preprocess failed: {type(exc).__name__}: {exc}"), FailureKind.INTERNAL)
        return items

    def _groups(self, items: dict[int, Prepared]) -> Iterator[tuple[list[int], dict[str, tuple[int, ...]]]]:
        """(members, non-batch shapes) of requests that may share chunks: equal non-batch
        shapes, equal values of unbatched inputs and equal engine settings."""
        if not self._batching:
            for index, item in items.items():
                yield [index], self._non_batch_shapes(item)
            return
        groups: dict[tuple, list[int]] = {}
        cut = 1 if self._validator.has_batch_axis else 0
        for index, item in items.items():
            # the validator fills ``batched`` in the model's input order, so the key needs no sorting
            shapes = tuple((n, a.shape[cut:]) for n, a in item.batched.items())
            shared = (
                tuple((n, v.dtype.str, v.shape, _value_key(v)) for n, v in sorted(item.shared.items()))
                if item.shared
                else ()
            )
            key = (shapes, shared, item.settings)
            members = groups.get(key)
            if members is None:
                groups[key] = [index]
            else:
                members.append(index)
        for (shapes, _, _), members in groups.items():
            yield members, dict(shapes)

    def _non_batch_shapes(self, item: Prepared) -> dict[str, tuple[int, ...]]:
        has_batch_axis = self._validator.has_batch_axis
        return {name: a.shape[1:] if has_batch_axis else a.shape for name, a in item.batched.items()}

    def _plan(self, members: list[int], shapes: dict[str, tuple[int, ...]], tracked: list[Tracked]) -> list[Chunk]:
        """The chunks of one group (its requests fail alone when no profile fits them)."""
        key = tuple(shapes.items())
        profile = self._profile_for.get(key)
        if profile is None:
            try:
                profile = choose_profile(self.profiles, shapes)
            except InputError as exc:
                profile = exc
            if len(self._profile_for) >= _PROFILE_CACHE:
                self._profile_for.clear()
            self._profile_for[key] = profile
        if isinstance(profile, InputError):
            for m in members:
                tracked[m].fail(profile, FailureKind.INPUT)
            return []
        rows = {m: max(tracked[m].rows, 1) for m in members}
        try:
            chunks = plan_group(members, rows, shapes, profile)
        except InputError as exc:  # rows the profile cannot take (an exact-batch model)
            for m in members:
                tracked[m].fail(exc, FailureKind.INPUT)
            return []
        for chunk in chunks:
            for part in chunk.parts:
                tracked[part.item].parts_left += 1
        return chunks

    def _adopted(
        self, chunk: Chunk, requests: list[tuple[Request, int, int | None]], answers: Answers | None
    ) -> _TrackedBatch:
        """A chunk of the lane's requests, tracked by the general path from now on (each with its
        rows and request rows, the chunk's part of it all its rows)."""
        tracked = []
        for request, rows, request_rows in requests:
            t = Tracked(request, self._observer, answers=answers)
            t.rows, t.request_rows, t.parts_left = rows, request_rows, 1
            tracked.append(t)
        return _TrackedBatch(self, chunk, {}, tracked)

    def _stage(self, slot: Slot, chunk: Chunk, items: Mapping[int, Prepared]) -> None:
        """Gather ``chunk`` into ``slot``'s input buffers (unbatched inputs: the shared value)."""
        first = items[chunk.parts[0].item]
        shared = first.shared
        shapes = {n: self._layout.engine_shape(n, s) for n, s in chunk.shapes.items()}
        shapes.update((n, v.shape) for n, v in shared.items())
        buffers = slot.inputs(shapes, first.settings)
        for name, value in shared.items():
            np.copyto(buffers[name], value, casting="no")
        batch_first = {n: self._layout.to_batch_first(n, buffers[n]) for n in chunk.shapes}
        gather(chunk, items, batch_first)

    def _dispatch(self, batch: _Batch, inline: bool) -> None:
        """Gather ``batch`` into a free slot and run it on the slot's worker thread, or right
        here when the caller waits anyway and nothing could run beside it (no thread hand-off)."""
        engine_failure = FailureKind.ENGINE
        if batch.finished():
            return
        if self.out_of_service is not None:  # an earlier chunk of this call lost the device
            batch.fail(self.out_of_service, engine_failure)
            return
        slot = self._take_slot()
        if slot is None:
            batch.fail(EngineError("the model is shutting down"), engine_failure)
            return
        started = time.perf_counter()
        try:
            batch.stage(slot)
        except EngineError as exc:
            self._free.put(slot)
            batch.fail(EngineError(f"could not stage the batch: {exc}"), engine_failure)
            return
        except Exception as exc:
            LOG.exception("could not stage a batch of %d row(s)", batch.chunk.rows)
            self._free.put(slot)
            batch.fail(EngineError(f"could not stage the batch: {type(exc).__name__}: {exc}"), engine_failure)
            return
        self._observer.phase(Phase.GATHER, time.perf_counter() - started)
        with self._idle:
            self._in_flight += 1
            self._observer.in_flight(self._in_flight)
        if inline:
            self._run(slot, batch, bind=True)
            return
        try:
            self._workers.submit(self._run, slot, batch)
        except RuntimeError as exc:  # the pool is shut down (the model is being unloaded)
            self._release(slot)
            batch.fail(EngineError(f"the model is shutting down: {exc}"), engine_failure)

    def _take_slot(self) -> Slot | None:
        """A free slot (waiting for one), or None once the runner is closing: the engine may be
        closed by the time a slot is free."""
        if self._closing.is_set():
            return None
        slot = self._free.get()
        if self._closing.is_set():
            self._free.put(slot)
            return None
        return slot

    def _bind_this_thread(self) -> None:
        if not getattr(self._bound, "done", False):
            self._engine.bind_thread()
            self._bound.done = True

    # -- run: on the slot's worker thread ---------------------------------------------------

    def _run(self, slot: Slot, batch: _Batch, bind: bool = False) -> None:
        chunk = batch.chunk
        try:
            if bind:
                self._bind_this_thread()
            try:
                outputs = slot.run()
            except EngineError as exc:
                if exc.fatal:
                    self._stop_service(exc)
                else:
                    LOG.warning("a batch of %d row(s) failed on slot %d: %s", chunk.rows, slot.index, exc)
                batch.fail(exc, FailureKind.ENGINE)
                return
            except Exception as exc:
                LOG.exception("the engine raised on slot %d", slot.index)
                batch.fail(EngineError(f"engine failed: {type(exc).__name__}: {exc}"), FailureKind.ENGINE)
                return
            self._engine.after_batch()
            times = slot.last_times
            self._observer.phase(Phase.HOST_TO_DEVICE, times.host_to_device)
            self._observer.phase(Phase.EXECUTE, times.execute)
            self._observer.phase(Phase.DEVICE_TO_HOST, times.device_to_host)
            self._observer.device_busy(times.device_busy)
            self._observer.batch(chunk.rows, chunk.padding)
            started = time.perf_counter()
            batch.answer(outputs)
            self._observer.phase(Phase.SCATTER, time.perf_counter() - started)
        except Exception as exc:  # a bug here must still answer every request of the chunk
            LOG.exception("internal error around a batch on slot %d", slot.index)
            batch.fail(GEError(f"internal error: {type(exc).__name__}: {exc}"), FailureKind.INTERNAL)
        finally:
            self._release(slot)

    def _release(self, slot: Slot) -> None:
        self._free.put(slot)
        with self._idle:
            self._in_flight -= 1
            self._observer.in_flight(self._in_flight)
            self._idle.notify_all()

    def _answer(self, chunk: Chunk, outputs: Arrays, tracked: list[Tracked]) -> None:
        layout = self._layout
        try:
            batch_first = outputs if layout.all_first else {n: layout.to_batch_first(n, a) for n, a in outputs.items()}
            pieces = scatter(chunk, batch_first, self._whole)
        except ValueError as exc:
            self._fail_chunk(chunk, tracked, EngineError(str(exc)))
            return
        for part, part_outputs in pieces:
            t = tracked[part.item]
            if t.claimed:
                continue
            complete = t.add_part(part.source_start, part_outputs)
            if complete is not None:
                if not layout.all_first:
                    complete = {n: layout.from_batch_first(n, a) for n, a in complete.items()}
                self._finish(t, complete)

    def _finish(self, t: Tracked, outputs: Arrays) -> None:
        info = t.request.info
        try:
            if self._sequences is not None:
                self._sequences.capture(info.correlation_id, info.flags, outputs)
            result = outputs if self._postprocess is None else self._postprocess(dict(outputs), info)
            t.succeed(self._outputs(result, info, t.request_rows))
        except InputError as exc:
            t.fail(exc, FailureKind.POSTPROCESS)
        except ContractError as exc:
            self._log_contract(exc, "postprocess", info.request_id)
            t.fail(exc, FailureKind.POSTPROCESS)
        except GEError as exc:
            t.fail(exc, FailureKind.POSTPROCESS)
        except Exception as exc:
            LOG.exception("postprocess failed for request %r", info.request_id)
            t.fail(GEError(f"postprocess failed: {type(exc).__name__}: {exc}"), FailureKind.POSTPROCESS)

    def _log_contract(self, error: ContractError, hook: str, request_id: str) -> None:
        """Once per failure, with where the hook is (its frame is gone by the time its result is checked)."""
        where = self._hook_locations.get(hook)
        LOG.error("request %r: %s%s", request_id, error, f"\n  the hook: {where}" if where else "")

    def _stop_service(self, cause: EngineError) -> None:
        with self._idle:
            if self.out_of_service is not None:
                return
            self.out_of_service = EngineError(
                f"the model is out of service after a fatal engine failure ({cause}); reload it once the device "
                "is back",
                fatal=True,
            )
        LOG.error("engine failed fatally, refusing every request from now on: %s", cause)
        self._observer.out_of_service(str(cause))

    def _fail_chunk(
        self, chunk: Chunk, tracked: list[Tracked], error: GEError, kind: FailureKind = FailureKind.ENGINE
    ) -> None:
        for part in chunk.parts:
            tracked[part.item].fail(error, kind)

    # -- lifecycle ------------------------------------------------------------------------

    def _expire_idle(self) -> None:
        """Drop each idle sequence's state when its timeout passes, without waiting for a request
        (on a thread of its own; a request arriving first drops it too, in ``submit``)."""
        states = self._sequences
        assert states is not None
        while True:
            left = states.until_expiry()
            delay = states.idle_timeout if left is None else left + _EXPIRY_SLACK
            if self._closing.wait(delay):
                return
            if states.expire():
                self._observer.sequences(len(states))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no batch is in flight; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Refuse new batches, let those in flight finish (for at most ``timeout`` seconds) and stop
        the workers. False when batches were still running at the timeout: the engine's slots are
        still in use then, so it must not be closed. Idempotent."""
        self._closing.set()
        drained = self.drain(timeout)
        self._workers.shutdown(wait=drained)
        return drained


class _Batch(Protocol):
    """One engine call, of the general path (``_TrackedBatch``) or of the fast lane (``LaneBatch``)."""

    chunk: Chunk

    def finished(self) -> bool:
        """Every request of it is answered already (nothing to run)."""

    def stage(self, slot: Slot) -> None:
        """Gather its inputs into ``slot``'s buffers."""

    def answer(self, outputs: Arrays) -> None:
        """Answer its requests from the engine's outputs."""

    def fail(self, error: GEError, kind: FailureKind) -> None:
        """Answer its requests not answered yet with ``error``."""


class _TrackedBatch:
    """A chunk of the general path: its requests tracked one by one."""

    __slots__ = ("chunk", "_runner", "_items", "_tracked")

    def __init__(self, runner: Runner, chunk: Chunk, items: Mapping[int, Prepared], tracked: list[Tracked]) -> None:
        self.chunk = chunk
        self._runner = runner
        self._items = items
        self._tracked = tracked

    def finished(self) -> bool:
        return all(self._tracked[p.item].claimed for p in self.chunk.parts)

    def stage(self, slot: Slot) -> None:
        self._runner._stage(slot, self.chunk, self._items)

    def answer(self, outputs: Arrays) -> None:
        self._runner._answer(self.chunk, outputs, self._tracked)

    def fail(self, error: GEError, kind: FailureKind) -> None:
        for part in self.chunk.parts:
            self._tracked[part.item].fail(error, kind)


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
