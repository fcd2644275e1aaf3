"""The request path between Triton glue and an engine: validate, batch, run, answer. One path
serves every request.

``Runner.submit`` takes a list of requests (numpy inputs, what hooks may know, and a ``respond``
callback), calls the ``preprocess`` hook once over them when the model has one (per request, or
per batch), and per request ``Validator.prepare`` (checks decided by the tensors' names, data
types and shapes are made once per distinct signature and remembered; the rest only where the
model needs it). Requests that
may share a batch (equal non-batch shapes, equal unbatched values and engine settings) form a
*group*, which knows its profile and remembers the plan of each composition of rows it has seen
(``batching.plan_group``). Each planned batch is gathered straight into a free slot's input
buffers (one copy per input) and run on that slot's worker thread, which answers its requests:
when nothing but the config's checks stands between the engine's outputs and the client (no
``postprocess``, no sequence state, outputs already of the config's types and dims, checked once
per batch) each request gets its rows as they are; otherwise each request's rows go through
sequence capture, the ``postprocess`` hook (once over the requests the batch completes) and the
output contract. Every request is answered exactly once (a claim table per call), and its
``RequestInfo.context`` is cleared with its answer.

The hooks are called in two places only: ``Runner._grouped`` calls ``preprocess`` (on the
submitting thread), ``Runner._finish`` calls ``postprocess`` (on the worker thread). A per-request
hook runs as a batch hook that calls it on each request (``requests.EachRequest``): one path for both.

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
from ge_python_backend.serving.requests import (
    Arrays,
    BatchHook,
    EachRequest,
    Hook,
    Request,
    RequestInfo,
    hook_location,
)
from ge_python_backend.serving.sequences import SequenceStates
from ge_python_backend.serving.validation import Batched, Prepared, Validator
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
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
        preprocess_batch: BatchHook | None = None,
        postprocess_batch: BatchHook | None = None,
        layout: Layout | None = None,
        sequences: SequenceStates | None = None,
        reject_nonfinite: bool = False,
        observers: Sequence[Observer] = (),
        spec: ModelSpec | None = None,
    ) -> None:
        """``outputs``: the config's outputs, what every answer is checked against. ``spec``: the
        engine's model as the config completes it (tensors of open rank get the config's rank,
        ``matching.refine_spec``); default the engine's own. Each side takes one hook, per request
        (``preprocess``) or per batch (``preprocess_batch``)."""
        hooks: dict[str, tuple[str, BatchHook]] = {}
        for side, each, batch in (
            ("preprocess", preprocess, preprocess_batch),
            ("postprocess", postprocess, postprocess_batch),
        ):
            if each is not None and batch is not None:
                raise ValueError(f"give {side} or {side}_batch, not both")
            if batch is not None:
                hooks[side] = (f"{side}_batch", batch)
            elif each is not None:
                hooks[side] = (side, EachRequest(each))
        self._engine = engine
        model = spec or engine.spec
        self._layout = (layout or Layout()).with_model(model)
        self._layout.check(model)
        self._spec = self._layout.batch_first_spec(model)
        self._whole = self._layout.whole_outputs(model)
        self._batching = batching
        self._sequences = sequences
        self._observer = Observers(observers)
        self._preprocess = (
            _HookClock(hooks["preprocess"][1], Phase.PREPROCESS, self._observer) if ("preprocess" in hooks) else None
        )
        self._postprocess = (
            _HookClock(hooks["postprocess"][1], Phase.POSTPROCESS, self._observer) if ("postprocess" in hooks) else None
        )
        self._validator = Validator(
            model,
            self._layout,
            batching=batching,
            max_batch_size=max_batch_size,
            hooked="preprocess" in hooks,
            sequences=sequences,
            reject_nonfinite=reject_nonfinite,
            utf8_strings=engine.utf8_strings,
        )
        self._batched = tuple(t.name for t in model.inputs if self._layout.axis(t.name) is not None)
        self._settings = engine.request_settings
        self._outputs = OutputContract(
            outputs, batching=batching, source=hooks["postprocess"][0] if "postprocess" in hooks else "the model"
        )
        #: per declared output: (name, numpy type, dims the answer leaves with, whether they are all fixed)
        self._declared = tuple((d.name, numpy_dtype(d.dtype), d.produced, -1 not in d.produced) for d in outputs)
        #: the outputs a request that names none gets (most requests)
        self._every_output = self._outputs.names(())
        #: answers may be the engine's rows as they are once a batch's outputs fit the config
        self._rows_as_they_are = (
            self._postprocess is None and sequences is None and self._layout.all_first and not self._whole
        )
        #: per side, the hook's name (``preprocess`` or ``preprocess_batch``, ...) and where it is defined
        self._hook_sites = {side: (name, hook_location(hook)) for side, (name, hook) in hooks.items()}
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
        #: the in-flight count's lock (a plain lock: entered twice per batch) and the condition a drain waits on
        self._count_lock = threading.Lock()
        self._idle = threading.Condition(self._count_lock)
        self._draining = 0
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
        prepared, arrays = call.prepared, call.arrays
        requests = call.requests
        made: Sequence[Any] | None = None
        if self._preprocess is not None:
            results = self._run_hook(self._preprocess, "preprocess", [dict(r.inputs) for r in requests], requests)
            if isinstance(results, GEError):  # the hook failed as a whole: every request with it
                kind = FailureKind.INPUT if isinstance(results, InputError) else FailureKind.INTERNAL
                for index in range(len(requests)):
                    call.fail(index, results, kind)
                return ()
            made = results
        groups: dict[_Group, list[int]] = {}
        alone: list[tuple[_Group, list[int]]] = []
        prepare, always = self._validator.prepare, self._settings is RequestSettings.ALWAYS
        with_parameters = self._settings is RequestSettings.WITH_PARAMETERS
        for index, request in enumerate(requests):
            info = request.info
            try:
                if made is not None:
                    result = made[index]
                    if isinstance(result, BaseException):
                        raise result
                    batched, item = prepare(request.inputs, info, result)
                else:
                    batched, item = prepare(request.inputs, info)
                if always or (with_parameters and info.parameters):
                    shapes = {name: batched[name].shape for name in self._batched}
                    shapes.update((n, a.shape) for n, a in item.shared.items())
                    item = item.with_settings(self._engine.batch_settings(info.parameters, shapes, info.request_id))
                group = item.signature.group
                if group is None or item.shared or item.settings is not None:
                    group = self._group(item)
            except Exception as exc:
                call.fail(index, *self._refusal(exc, "preprocess", f"request {info.request_id!r}"))
                continue
            prepared[index] = item
            arrays[index] = batched
            if not self._batching:
                alone.append((group, [index]))
            elif (members := groups.get(group)) is None:
                groups[group] = [index]
            else:
                members.append(index)
        return alone or groups.items()

    def _run_hook(
        self, hook: _HookClock, side: str, arrays: list[dict[str, np.ndarray]], requests: Sequence[Request]
    ) -> Sequence[Any] | GEError:
        """``hook`` over ``requests`` (``arrays``: their tensors): each one's result, in order (its
        tensors, or the exception that fails it alone), or the error that fails them all when the
        hook raised or broke its contract (logged once)."""
        try:
            results = hook(arrays, [r.info for r in requests])
            if not isinstance(results, Sequence) or len(results) != len(requests):
                found = f"{len(results)} results" if isinstance(results, Sequence) else type(results).__name__
                raise ContractError(
                    f"{self._hook_sites[side][0]} returned {found} for {len(requests)} request(s); it must return "
                    "one result per request, in order (its tensors, or the exception that fails it)"
                )
        except Exception as exc:  # named after the hook: it failed every request it had
            name = self._hook_sites[side][0]
            error, _ = self._refusal(exc, side, f"the {len(requests)} request(s) of a batch", name)
            return error
        return results

    def _refusal(self, exc: Exception, side: str, about: str, name: str = "") -> tuple[GEError, FailureKind]:
        """What a request gets for ``exc``, met preparing it (``side`` preprocess) or answering it
        (postprocess), logged once where an operator must see it: the client's error (InputError)
        is not; a hook's broken contract is, with where the hook is; anything unexpected is, with
        its traceback, as ``name`` (default ``side``) failed. ``about``: which request(s)."""
        pre = side == "preprocess"
        if isinstance(exc, InputError):
            return exc, FailureKind.INPUT if pre else FailureKind.POSTPROCESS
        if isinstance(exc, ContractError):  # the hook's bug, not the client's
            self._log_contract(exc, side, about)
            return exc, FailureKind.INTERNAL if pre else FailureKind.POSTPROCESS
        if isinstance(exc, GEError) and not pre:
            return exc, FailureKind.POSTPROCESS
        # a crash in the hook (or here) is the server's fault, not the client's
        name = name or side
        LOG.error("%s failed for %s", name, about, exc_info=exc)
        kind = FailureKind.INTERNAL if pre else FailureKind.POSTPROCESS
        return GEError(f"{name} failed: {type(exc).__name__}: {exc}"), kind

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
        with self._count_lock:
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
        with self._count_lock:
            self._in_flight -= 1
            self._observer.in_flight(self._in_flight)
            if self._draining:
                self._idle.notify_all()

    def _fits(self, outputs: Arrays, chunk: Chunk) -> bool:
        """The engine's outputs are what the config declares for every request's rows of them:
        the config's data type and dims, the batch's rows first (checked once per batch)."""
        batch = next(iter(chunk.shapes.values()))[0] if chunk.batch_axis else 0
        for name, dtype, dims, fixed in self._declared:
            array = outputs.get(name)
            if array is None or array.dtype != dtype:
                return False
            shape = array.shape
            if chunk.batch_axis:
                if not shape or shape[0] != batch:
                    return False
                shape = shape[1:] if self._batching else (chunk.rows,) + shape[1:]
            if not (shape == dims if fixed else shape_fits(shape, dims)):
                return False
        return True

    def _finish(self, call: _Call, ready: list[tuple[int, Arrays]]) -> None:
        """Answer each request of ``ready`` (index, its rows of the engine's outputs, batch axis
        first): sequence state, the ``postprocess`` hook (once over them all), the output contract."""
        requests, layout, sequences = call.requests, self._layout, self._sequences
        indexes: list[int] = []
        results: list[Any] = []
        for index, outputs in ready:
            info = requests[index].info
            try:
                if not layout.all_first:
                    outputs = {n: layout.from_batch_first(n, a) for n, a in outputs.items()}
                if sequences is not None:
                    sequences.capture(info.correlation_id, info.flags, outputs)
            except Exception as exc:
                call.fail(index, *self._refusal(exc, "postprocess", f"request {info.request_id!r}"))
                continue
            indexes.append(index)
            results.append(dict(outputs) if self._postprocess is not None else outputs)
        if self._postprocess is not None and indexes:
            made = self._run_hook(self._postprocess, "postprocess", results, [requests[i] for i in indexes])
            if isinstance(made, GEError):  # the hook failed as a whole: every request with it
                for index in indexes:
                    call.fail(index, made, FailureKind.POSTPROCESS)
                return
            results = list(made)
        for index, result in zip(indexes, results):
            info = requests[index].info
            try:
                if isinstance(result, BaseException):
                    raise result
                answer = self._outputs(result, info, call.prepared[index].request_rows)  # type: ignore[union-attr]
            except Exception as exc:
                call.fail(index, *self._refusal(exc, "postprocess", f"request {info.request_id!r}"))
                continue
            call.succeed(index, answer)

    def _log_contract(self, error: ContractError, side: str, about: str) -> None:
        """Once per failure, with where the hook is (its frame is gone by the time its result is checked)."""
        where = self._hook_sites[side][1] if side in self._hook_sites else None
        LOG.error("%s: %s%s", about, error, f"\n  the hook: {where}" if where else "")

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
            self._draining += 1
            try:
                return self._idle.wait_for(lambda: self._in_flight == 0, timeout)
            finally:
                self._draining -= 1

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
        "arrays",
        "waited",
        "_observer",
        "_sequences",
        "claims",
        "_lock",
        "_left",
        "_done",
        "split_parts",
    )

    def __init__(
        self, requests: Sequence[Request], observer: Observer, sequences: SequenceStates | None, waited: bool
    ) -> None:
        """``sequences``: the states a failed step drops (its sequence must start over)."""
        self.requests = requests
        self.prepared: list[Prepared | None] = [None] * len(requests)
        #: each prepared request's batched engine inputs
        self.arrays: list[Batched | None] = [None] * len(requests)
        self.waited = waited
        self._observer = observer
        self._sequences = sequences
        #: the claim table: 1 where the request is answered (or being answered)
        self.claims = bytearray(len(requests))
        self._lock = threading.Lock()
        self._left = len(requests)
        #: held until the last answer when the caller waits (a plain lock is a cheaper latch than an Event)
        self._done = threading.Lock()
        if waited and requests:
            self._done.acquire()
        #: requests split between batches: index -> [their outputs so far, parts still to come]
        self.split_parts: dict[int, list] = {}

    def wait(self) -> None:
        if self.waited:
            with self._done:
                pass

    def _claim(self, index: int) -> bool:
        with self._lock:
            if self.claims[index]:
                return False
            self.claims[index] = 1
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
        claims = self.claims
        with self._lock:
            # one look when none is answered yet (the common case)
            fresh = [(i, outputs) for i, outputs in answers if not claims[i]] if 1 in claims else answers
            for index, _ in fresh:
                claims[index] = 1
        requests = self.requests
        for index, outputs in fresh:
            request = requests[index]
            try:
                request.respond(outputs, None)
            except Exception:  # the client may be gone; nothing else can be done for this request
                LOG.exception("could not send the response of request %r", request.info.request_id)
            if request.info.context:  # what a preprocess left that nothing read
                request.info.context.clear()
        if fresh:
            self._delivered(len(fresh))

    def _send(self, request: Request, outputs: Arrays | None, error: GEError | None) -> None:
        """Answer ``request``; its context goes with the answer."""
        try:
            request.respond(outputs, error)
        except Exception:  # the client may be gone; nothing else can be done for this request
            LOG.exception("could not send the response of request %r", request.info.request_id)
        finally:
            if request.info.context:
                request.info.context.clear()
            self._delivered()

    def count_parts(self, plan: list[Chunk], members: list[int]) -> None:
        """Note the requests ``plan`` splits between its batches."""
        counts: dict[int, int] = {}
        for chunk in plan:
            for part in chunk.parts:
                counts[part.item] = counts.get(part.item, 0) + 1
        for item, count in counts.items():
            if count > 1:
                self.split_parts[members[item]] = [None, count]

    def add_part(self, index: int, start: int, outputs: Arrays) -> Arrays | None:
        """Record one part of a split request's outputs; its outputs once every part is in."""
        rows = self.prepared[index].rows  # type: ignore[union-attr]
        with self._lock:
            entry = self.split_parts[index]
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
        members = self._members
        claims = self._call.claims
        return 1 in claims and all(claims[members[p.item]] for p in self.chunk.parts)

    def fail(self, error: GEError, kind: FailureKind) -> None:
        """Answer its requests not answered yet with ``error``."""
        call, members = self._call, self._members
        for part in self.chunk.parts:
            call.fail(members[part.item], error, kind)

    def stage(self, slot: Slot) -> None:
        """Gather the requests' rows into ``slot``'s input buffers (``batching.gather``: one copy
        per input, the padding zeroed); unbatched inputs get the group's shared value."""
        layout, chunk, call = self._runner._layout, self.chunk, self._call
        first: Prepared = call.prepared[self._members[chunk.parts[0].item]]  # type: ignore[assignment]
        arrays = call.arrays
        items: list[Batched] = [arrays[m] for m in self._members]  # type: ignore[misc]  # members are prepared
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
        if runner._rows_as_they_are and not call.split_parts and runner._fits(outputs, chunk):
            self._answer_rows(outputs)
            return
        try:
            pieces = scatter(chunk, outputs, runner._whole)
        except ValueError as exc:
            self.fail(EngineError(str(exc)), FailureKind.ENGINE)
            return
        ready: list[tuple[int, Arrays]] = []
        rows: Arrays
        for part, rows in pieces:
            index = members[part.item]
            if call.claims[index]:
                continue
            if index in call.split_parts:
                complete = call.add_part(index, part.source_start, rows)
                if complete is None:
                    continue
                rows = complete
            ready.append((index, rows))
        runner._finish(call, ready)

    def _answer_rows(self, outputs: Arrays) -> None:
        """Each request's rows of each output it asked for, as they are, in one pass."""
        runner, chunk, call, members = self._runner, self.chunk, self._call, self._members
        names_for, requests, every = runner._outputs.names, call.requests, runner._every_output
        answers: list[tuple[int, Arrays]] = []
        for part in chunk.parts:
            index = members[part.item]
            requested = requests[index].info.requested_outputs
            try:
                names = names_for(requested) if requested else every
            except ContractError:
                runner._finish(call, [(index, outputs)])  # which refuses it, naming the outputs
                continue
            if not chunk.batch_axis:
                answers.append((index, {name: outputs[name] for name in names}))
            elif len(names) == 1:  # a dict of one output without a comprehension (a call each, on 3.11)
                name = names[0]
                answers.append((index, {name: outputs[name][part.target_start : part.target_start + part.count]}))
            else:
                span = slice(part.target_start, part.target_start + part.count)
                answers.append((index, {name: outputs[name][span] for name in names}))
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

    def __init__(self, hook: BatchHook, phase: Phase, observer: Observers) -> None:
        self._hook, self._phase, self._report = hook, phase, observer.phase
        self._spent = threading.local()

    def __call__(
        self, arrays: list[dict[str, np.ndarray]], infos: list[RequestInfo]
    ) -> Sequence[Mapping[str, Any] | BaseException]:
        started = time.perf_counter()
        try:
            return self._hook(arrays, infos)
        finally:
            seconds = time.perf_counter() - started
            self._spent.seconds = getattr(self._spent, "seconds", 0.0) + seconds
            self._report(self._phase, seconds)

    def take(self) -> float:
        """The seconds this thread spent in the hook since the last take."""
        seconds = getattr(self._spent, "seconds", 0.0)
        self._spent.seconds = 0.0
        return seconds
