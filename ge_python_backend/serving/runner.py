"""The request path between Triton glue and an engine: validate, batch, run, answer. One path
serves every request.

``Runner.submit`` takes a list of requests (numpy inputs, what hooks may know, and a ``respond``
callback) and, per request, calls the ``preprocess`` hook when the model has one and
``Validator.prepare`` (checks decided by the tensors' names, data types and shapes are made once
per distinct signature and remembered; the rest only where the model needs it). Requests that
may share a batch (equal non-batch shapes, equal unbatched values and engine settings) form a
*group*, which knows its profile and remembers the plan of each composition of rows it has seen
(``batching.plan_group``). Each planned batch is gathered straight into a free slot's input
buffers (one copy per input) and run on that slot's worker thread, which answers its requests:
when nothing but the config's checks stands between the engine's outputs and the client (no
``postprocess``, no sequence state, outputs already of the config's types and dims, checked once
per batch) each request gets its rows as they are; otherwise each request's rows go through
sequence capture, the ``postprocess`` hook and the output contract. Every request is answered
exactly once (a claim table per call).

The hooks are called in two places only: ``Validator.prepare`` calls ``preprocess`` (on the
submitting thread), ``Runner._finish`` calls ``postprocess`` (on the worker thread).

``submit`` returns once every batch is handed over; it blocks while all slots are busy, which
is the back-pressure that lets Triton's batcher build the next batch meanwhile. With ``wait``,
and always for stateful models (a sequence's next step needs this step's state), it returns only
when its requests are answered. Nothing here knows Triton. Unexpected exceptions are logged once
with their traceback (stdlib ``logging``; GEModel bridges it to tritonserver's log); the client
gets one line.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ge_python_backend.engines.base import Engine, RequestSettings, Slot
from ge_python_backend.errors import ContractError, EngineError, GEError, InputError, detached
from ge_python_backend.serving.axes import Layout
from ge_python_backend.serving.batching import (
    Chunk,
    Profile,
    choose_profile,
    gather,
    plan_group,
    profiles_for,
    scatter,
)
from ge_python_backend.serving.observers import FailureKind, Observer, Observers, Phase
from ge_python_backend.serving.outputs import DeclaredTensor, OutputContract
from ge_python_backend.serving.requests import Arrays, Hook, Request, RequestInfo, hook_location
from ge_python_backend.serving.sequences import SequenceStates
from ge_python_backend.serving.validation import Prepared, Validator
from ge_python_backend.specs import ModelSpec, numpy_dtype, shape_fits

LOG = logging.getLogger(__name__)
#: distinct groups remembered, and plans remembered per group (beyond either the table starts over)
_GROUPS_REMEMBERED = 1024
_PLANS_REMEMBERED = 256
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
        self._sequences = sequences
        self._observer = Observers(observers)
        self._postprocess = None if postprocess is None else _HookClock(postprocess, Phase.POSTPROCESS, self._observer)
        self._validator = Validator(
            model,
            self._layout,
            batching=batching,
            max_batch_size=max_batch_size,
            preprocess=None if preprocess is None else _HookClock(preprocess, Phase.PREPROCESS, self._observer),
            sequences=sequences,
            reject_nonfinite=reject_nonfinite,
            utf8_strings=engine.utf8_strings,
        )
        self._batched = tuple(t.name for t in model.inputs if self._layout.axis(t.name) is not None)
        self._settings = engine.request_settings
        self._outputs = OutputContract(outputs, batching=batching, source="postprocess" if postprocess else "the model")
        #: per declared output: (name, numpy type, dims the answer leaves with)
        self._declared = tuple((d.name, numpy_dtype(d.dtype), d.produced) for d in outputs)
        #: answers may be the engine's rows as they are once a batch's outputs fit the config
        self._rows_as_they_are = (
            postprocess is None and sequences is None and self._layout.all_first and not self._whole
        )
        self._hook_locations = {
            name: hook_location(hook)
            for name, hook in (("preprocess", preprocess), ("postprocess", postprocess))
            if hook
        }
        self.profiles: tuple[Profile, ...] = profiles_for(self._spec, batching, max_batch_size, self._whole)
        self._groups: dict[Hashable, _Group] = {}
        self._free: queue.SimpleQueue[Slot] = queue.SimpleQueue()  # C-implemented: a batch takes and returns one
        for slot in engine.slots:
            self._free.put(slot)
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

    def submit(self, requests: Sequence[Request], wait: bool = False) -> None:
        """Validate, batch and dispatch ``requests``; every one is answered exactly once.

        With ``wait`` (and always for stateful models, whose next step needs this one's state)
        return only once every request is answered. Answers may then be read after later
        batches of the same call have reused a slot, so they own their data whenever the call
        runs more than one batch.
        """
        if self._sequences is None:
            call = _Call(requests, self._observer, None, waited=wait)
            self._run_call(call, kept=wait, other_batches=False)
            call.wait()
            return
        self._sequences.expire()
        waves = _waves(requests)
        for wave in waves:
            call = _Call(wave, self._observer, self._sequences, waited=True)
            self._run_call(call, kept=wait, other_batches=len(waves) > 1)
            call.wait()
        self._observer.sequences(len(self._sequences))

    def _run_call(self, call: _Call, kept: bool, other_batches: bool) -> None:
        """Prepare, group, plan and dispatch the requests of ``call``. ``kept``: answers are read
        after the call returns, so with several batches in the call (here, or ``other_batches``
        elsewhere in it) they must own their data."""
        if self.out_of_service is not None:
            for index in range(len(call.requests)):
                call.fail(index, self.out_of_service, FailureKind.ENGINE)
            return
        try:
            batches: list[_Batch] = []
            for group, members in self._grouped(call):
                batches += self._planned(call, group, members)
            if kept and self._engine.outputs_alias_slot_memory and (other_batches or len(batches) > 1):
                for batch in batches:
                    batch.copy = True
            inline = call.waited and (len(batches) == 1 or len(self._engine.slots) == 1)
            for batch in batches:
                self._dispatch(batch, inline)
        except Exception as exc:  # a bug here must still answer every request
            LOG.exception("internal error while batching %d request(s)", len(call.requests))
            error = GEError(f"internal error while batching: {type(exc).__name__}: {exc}")
            for index in range(len(call.requests)):
                call.fail(index, error, FailureKind.INTERNAL)

    def _grouped(self, call: _Call) -> Iterable[tuple[_Group, list[int]]]:
        """Each request prepared (a bad one answered here), then the requests that may share a
        batch, by group (without batching: each request alone)."""
        prepared = call.prepared
        groups: dict[_Group, list[int]] = {}
        alone: list[tuple[_Group, list[int]]] = []
        for index, request in enumerate(call.requests):
            info = request.info
            try:
                item = self._validator.prepare(request.inputs, info)
                if self._settings is RequestSettings.ALWAYS or (
                    info.parameters and self._settings is RequestSettings.WITH_PARAMETERS
                ):
                    shapes = {name: item.batched[name].shape for name in self._batched}
                    shapes.update((n, a.shape) for n, a in item.shared.items())
                    item.settings = self._engine.batch_settings(info.parameters, shapes, info.request_id)
                signature = item.signature
                if signature.group is None or item.shared or item.settings is not None:
                    group = self._group(item)
                else:
                    group = signature.group
            except InputError as exc:
                call.fail(index, exc, FailureKind.INPUT)
                continue
            except ContractError as exc:  # the hook's bug, not the client's
                self._log_contract(exc, "preprocess", info.request_id)
                call.fail(index, exc, FailureKind.INTERNAL)
                continue
            except Exception as exc:  # a crash in the hook (or here) is the server's fault, not the client's
                LOG.exception("preprocess failed for request %r", info.request_id)
                call.fail(index, GEError(f"preprocess failed: {type(exc).__name__}: {exc}"), FailureKind.INTERNAL)
                continue
            prepared[index] = item
            if not self._batching:
                alone.append((group, [index]))
            elif (members := groups.get(group)) is None:
                groups[group] = [index]
            else:
                members.append(index)
        return alone or groups.items()

    def _group(self, item: Prepared) -> _Group:
        """The group of a prepared request: its signature's, unless unbatched values or engine
        settings set it apart."""
        signature = item.signature
        if not item.shared and item.settings is None:
            if signature.group is None:
                signature.group = self._group_of(signature.shapes, signature.shapes)
            return signature.group
        shared = tuple((n, v.dtype.str, v.shape, _value_key(v)) for n, v in sorted(item.shared.items()))
        return self._group_of((signature.shapes, shared, item.settings), signature.shapes)

    def _group_of(self, key: Hashable, shapes: tuple[tuple[str, tuple[int, ...]], ...]) -> _Group:
        group = self._groups.get(key)
        if group is None:
            if len(self._groups) >= _GROUPS_REMEMBERED:
                self._groups.clear()
            group = self._groups[key] = _Group(dict(shapes), self.profiles)
        return group

    def _planned(self, call: _Call, group: _Group, members: list[int]) -> list[_Batch]:
        """The batches of one group's requests (they fail alone when no profile, or no plan, fits them)."""
        prepared = call.prepared
        rows = tuple([max(prepared[m].rows, 1) for m in members])  # type: ignore[union-attr]
        plan = group.plan(rows)
        if isinstance(plan, InputError):
            for member in members:
                call.fail(member, plan, FailureKind.INPUT)
            return []
        if len(plan) > 1:
            call.count_parts(plan, members)
        return [_Batch(self, call, chunk, members) for chunk in plan]

    def _dispatch(self, batch: _Batch, inline: bool) -> None:
        """Gather ``batch`` into a free slot and run it on the slot's worker thread, or right
        here when the caller waits anyway and nothing could run beside it (no thread hand-off)."""
        if batch.finished():
            return
        if self.out_of_service is not None:  # an earlier batch of this call lost the device
            batch.fail(self.out_of_service, FailureKind.ENGINE)
            return
        slot = self._take_slot()
        if slot is None:
            batch.fail(EngineError("the model is shutting down"), FailureKind.ENGINE)
            return
        started = time.perf_counter()
        try:
            batch.stage(slot)
        except Exception as exc:
            if not isinstance(exc, EngineError):
                LOG.exception("could not stage a batch of %d row(s)", batch.chunk.rows)
            self._free.put(slot)
            text = str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
            batch.fail(EngineError(f"could not stage the batch: {text}"), FailureKind.ENGINE)
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
            batch.fail(EngineError(f"the model is shutting down: {exc}"), FailureKind.ENGINE)

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
            hooks = 0.0 if self._postprocess is None else self._postprocess.take()  # its own phase
            self._observer.phase(Phase.SCATTER, time.perf_counter() - started - hooks)
        except Exception as exc:  # a bug here must still answer every request of the batch
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

    def _fits(self, outputs: Arrays, chunk: Chunk) -> bool:
        """The engine's outputs are what the config declares for every request's rows of them:
        the config's data type and dims, the batch's rows first (checked once per batch)."""
        batch = next(iter(chunk.shapes.values()))[0] if chunk.batch_axis else 0
        for name, dtype, dims in self._declared:
            array = outputs.get(name)
            if array is None or array.dtype != dtype:
                return False
            shape = array.shape
            if chunk.batch_axis:
                if not shape or shape[0] != batch:
                    return False
                shape = shape[1:] if self._batching else (chunk.rows,) + shape[1:]
            if not shape_fits(shape, dims):
                return False
        return True

    def _finish(self, call: _Call, index: int, outputs: Arrays) -> None:
        """Answer request ``index`` from its rows of the engine's outputs (batch axis first):
        sequence state, the ``postprocess`` hook, the output contract."""
        request = call.requests[index]
        info = request.info
        try:
            if not self._layout.all_first:
                outputs = {n: self._layout.from_batch_first(n, a) for n, a in outputs.items()}
            if self._sequences is not None:
                self._sequences.capture(info.correlation_id, info.flags, outputs)
            result = outputs if self._postprocess is None else self._postprocess(dict(outputs), info)
            answer = self._outputs(result, info, call.prepared[index].request_rows)  # type: ignore[union-attr]
        except InputError as exc:
            call.fail(index, exc, FailureKind.POSTPROCESS)
            return
        except ContractError as exc:
            self._log_contract(exc, "postprocess", info.request_id)
            call.fail(index, exc, FailureKind.POSTPROCESS)
            return
        except GEError as exc:
            call.fail(index, exc, FailureKind.POSTPROCESS)
            return
        except Exception as exc:
            LOG.exception("postprocess failed for request %r", info.request_id)
            call.fail(index, GEError(f"postprocess failed: {type(exc).__name__}: {exc}"), FailureKind.POSTPROCESS)
            return
        call.succeed(index, answer)

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


class _Group:
    """Requests that may share a batch: their non-batch shapes, the profile that runs them (or the
    InputError saying none does) and the plan of each composition of rows seen."""

    __slots__ = ("shapes", "profile", "plans")

    def __init__(self, shapes: dict[str, tuple[int, ...]], profiles: Sequence[Profile]) -> None:
        self.shapes = shapes
        try:
            self.profile: Profile | InputError = choose_profile(profiles, shapes)
        except InputError as exc:
            self.profile = detached(exc)  # remembered: it must not keep the call that met it alive
        self.plans: dict[tuple[int, ...], list[Chunk] | InputError] = {}

    def plan(self, rows: tuple[int, ...]) -> list[Chunk] | InputError:
        """The batches of members with ``rows`` each (parts indexed by member), or why they cannot run."""
        found = self.plans.get(rows)
        if found is None:
            if isinstance(self.profile, InputError):
                return self.profile
            try:
                found = plan_group(range(len(rows)), rows, self.shapes, self.profile)
            except InputError as exc:  # rows the profile cannot take (an exact-batch model)
                found = detached(exc)  # remembered: it must not keep the call that met it alive
            if len(self.plans) >= _PLANS_REMEMBERED:
                self.plans.clear()
            self.plans[rows] = found
        return found


class _Call:
    """The requests of one ``submit`` (or one wave of a stateful model's): each is answered
    exactly once, whoever gets there first (a claim per request), and a waiting caller is
    released when the last answer has been handed to ``respond``."""

    __slots__ = (
        "requests",
        "prepared",
        "waited",
        "_observer",
        "_sequences",
        "_claimed",
        "_lock",
        "_left",
        "_done",
        "_parts",
    )

    def __init__(
        self, requests: Sequence[Request], observer: Observer, sequences: SequenceStates | None, waited: bool
    ) -> None:
        """``sequences``: the states a failed step drops (its sequence must start over)."""
        self.requests = requests
        self.prepared: list[Prepared | None] = [None] * len(requests)
        self.waited = waited
        self._observer = observer
        self._sequences = sequences
        self._claimed = bytearray(len(requests))
        self._lock = threading.Lock()
        self._left = len(requests)
        #: held until the last answer when the caller waits (a plain lock is a cheaper latch than an Event)
        self._done = threading.Lock()
        if waited and requests:
            self._done.acquire()
        #: requests split between batches: index -> [their outputs so far, parts still to come]
        self._parts: dict[int, list] = {}

    def wait(self) -> None:
        if self.waited:
            with self._done:
                pass

    def claimed(self, index: int) -> bool:
        return bool(self._claimed[index])

    def _claim(self, index: int) -> bool:
        with self._lock:
            if self._claimed[index]:
                return False
            self._claimed[index] = 1
            return True

    def _delivered(self, count: int = 1) -> None:
        with self._lock:
            self._left -= count
            last = self._left == 0
        if last and self.waited:
            self._done.release()

    def fail(self, index: int, error: GEError, kind: FailureKind) -> None:
        """Answer request ``index`` with ``error`` (logged already where it had to be), detached from
        the frames that raised it: whoever keeps the answer must not keep this call alive with it."""
        if not self._claim(index):
            return
        detached(error)
        request = self.requests[index]
        if self._sequences is not None:
            self._sequences.forget(request.info.correlation_id, str(error))
        self._observer.failure(kind)  # before the answer: a client that got it can read the metric
        self._send(request, None, error)

    def succeed(self, index: int, outputs: Arrays) -> None:
        if self._claim(index):
            self._send(self.requests[index], outputs, None)

    def succeed_all(self, answers: list[tuple[int, Arrays]]) -> None:
        """``succeed`` for several requests: one claim and one count for them all."""
        with self._lock:
            fresh = [(index, outputs) for index, outputs in answers if not self._claimed[index]]
            for index, _ in fresh:
                self._claimed[index] = 1
        requests = self.requests
        for index, outputs in fresh:
            try:
                requests[index].respond(outputs, None)
            except Exception:  # the client may be gone; nothing else can be done for this request
                LOG.exception("could not send the response of request %r", requests[index].info.request_id)
        if fresh:
            self._delivered(len(fresh))

    def _send(self, request: Request, outputs: Arrays | None, error: GEError | None) -> None:
        try:
            request.respond(outputs, error)
        except Exception:  # the client may be gone; nothing else can be done for this request
            LOG.exception("could not send the response of request %r", request.info.request_id)
        finally:
            self._delivered()

    def count_parts(self, plan: list[Chunk], members: list[int]) -> None:
        """Note the requests ``plan`` splits between its batches."""
        counts: dict[int, int] = {}
        for chunk in plan:
            for part in chunk.parts:
                counts[part.item] = counts.get(part.item, 0) + 1
        for item, count in counts.items():
            if count > 1:
                self._parts[members[item]] = [None, count]

    def split(self, index: int) -> bool:
        return index in self._parts

    @property
    def splits(self) -> bool:
        """Some request of the call is split between batches."""
        return bool(self._parts)

    def add_part(self, index: int, start: int, outputs: Arrays) -> Arrays | None:
        """Record one part of a split request's outputs; its outputs once every part is in."""
        rows = self.prepared[index].rows  # type: ignore[union-attr]
        with self._lock:
            entry = self._parts[index]
            if entry[0] is None:
                entry[0] = {name: np.empty((rows,) + a.shape[1:], a.dtype) for name, a in outputs.items()}
            for name, array in outputs.items():
                entry[0][name][start : start + len(array)] = array
            entry[1] -= 1
            return entry[0] if entry[1] == 0 else None


class _Batch:
    """One engine call: a planned chunk of a call's requests (``members``: the chunk's parts are
    indexed by member)."""

    __slots__ = ("chunk", "copy", "_runner", "_call", "_members")

    def __init__(self, runner: Runner, call: _Call, chunk: Chunk, members: list[int]) -> None:
        self.chunk = chunk
        #: copy the outputs out of slot memory before answering (the slot runs again before they are read)
        self.copy = False
        self._runner = runner
        self._call = call
        self._members = members

    def finished(self) -> bool:
        """Every request of it is answered already (nothing to run)."""
        call, members = self._call, self._members
        return all(call.claimed(members[p.item]) for p in self.chunk.parts)

    def fail(self, error: GEError, kind: FailureKind) -> None:
        """Answer its requests not answered yet with ``error``."""
        call, members = self._call, self._members
        for part in self.chunk.parts:
            call.fail(members[part.item], error, kind)

    def stage(self, slot: Slot) -> None:
        """Gather the requests' rows into ``slot``'s input buffers (``batching.gather``: one copy
        per input, the padding zeroed); unbatched inputs get the group's shared value."""
        layout, chunk, prepared = self._runner._layout, self.chunk, self._call.prepared
        first: Prepared = prepared[self._members[chunk.parts[0].item]]  # type: ignore[assignment]
        items = [prepared[m].batched for m in self._members]  # type: ignore[union-attr]
        shapes = chunk.shapes
        if not layout.all_first:
            shapes = {n: layout.engine_shape(n, s) for n, s in shapes.items()}
        if first.shared:
            shapes = {**shapes, **{n: v.shape for n, v in first.shared.items()}}
        buffers = slot.inputs(shapes, first.settings)
        for name, value in first.shared.items():
            np.copyto(buffers[name], value, casting="no")
        if layout.all_first and not first.shared:
            gather(chunk, items, buffers)
        else:
            gather(chunk, items, {n: layout.to_batch_first(n, buffers[n]) for n in chunk.shapes})

    def answer(self, outputs: Arrays) -> None:
        """Answer each request from its rows of ``outputs`` (``batching.scatter``): as they are
        when they already fit the config (see the module docstring), else through ``Runner._finish``."""
        runner, chunk, call, members = self._runner, self.chunk, self._call, self._members
        layout = runner._layout
        if not layout.all_first:
            outputs = {n: layout.to_batch_first(n, a) for n, a in outputs.items()}
        if self.copy:
            outputs = {name: array.copy() for name, array in outputs.items()}
        if runner._rows_as_they_are and not call.splits and runner._fits(outputs, chunk):
            self._answer_rows(outputs)
            return
        try:
            pieces = scatter(chunk, outputs, runner._whole)
        except ValueError as exc:
            self.fail(EngineError(str(exc)), FailureKind.ENGINE)
            return
        rows: Arrays
        for part, rows in pieces:
            index = members[part.item]
            if call.claimed(index):
                continue
            if call.split(index):
                complete = call.add_part(index, part.source_start, rows)
                if complete is None:
                    continue
                rows = complete
            runner._finish(call, index, rows)

    def _answer_rows(self, outputs: Arrays) -> None:
        """Each request's rows of each output it asked for, as they are, in one pass."""
        runner, chunk, call, members = self._runner, self.chunk, self._call, self._members
        names_for, requests = runner._outputs.names, call.requests
        answers: list[tuple[int, Arrays]] = []
        for part in chunk.parts:
            index = members[part.item]
            try:
                names = names_for(requests[index].info.requested_outputs)
            except ContractError:
                runner._finish(call, index, outputs)  # which refuses it, naming the outputs
                continue
            if chunk.batch_axis:
                span = slice(part.target_start, part.target_start + part.count)
                answers.append((index, {name: outputs[name][span] for name in names}))
            else:
                answers.append((index, {name: outputs[name] for name in names}))
        call.succeed_all(answers)


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


class _HookClock:
    """A hook that reports each call's time (returned or raised) as its phase, and keeps the
    time per thread so the phase around it (scatter, around postprocess) can leave it out."""

    def __init__(self, hook: Hook, phase: Phase, observer: Observers) -> None:
        self._hook, self._phase, self._report = hook, phase, observer.phase
        self._spent = threading.local()

    def __call__(self, arrays: dict[str, np.ndarray], info: RequestInfo) -> Mapping[str, Any]:
        started = time.perf_counter()
        try:
            return self._hook(arrays, info)
        finally:
            seconds = time.perf_counter() - started
            self._spent.seconds = getattr(self._spent, "seconds", 0.0) + seconds
            self._report(self._phase, seconds)

    def take(self) -> float:
        """The seconds this thread spent in the hook since the last take."""
        seconds = getattr(self._spent, "seconds", 0.0)
        self._spent.seconds = 0.0
        return seconds
