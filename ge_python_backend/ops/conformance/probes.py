"""Probes: docs/fidelity.md rows as code, calling pyACL directly (never through the engine).

A probe makes a few pyACL calls and records, per value it looks at, what it observed, what the
row claims CANN answers and, where the simulator deliberately answers otherwise (it is stricter
in places, fidelity.md says where), what ``acl-sim`` answers. On ``acl`` a probe passes when every
observation equals the claim; on ``acl-sim`` when it equals the simulator's answer. A value no
source states is recorded with no claim: the probe is then "skip: records only" on a device, and
its observations are what a bug report should carry. The same probes against two pyACLs are the
differential check between the simulator and a device.

Every probe releases what it made, in reverse order, whatever happens (``ProbeContext.at_exit``);
a release that fails fails the probe.
"""

from __future__ import annotations

import ctypes
import functools
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ge_python_backend.ascend.constants import ACL_DEVICE, ACL_SUCCESS, MallocPolicy, MemcpyKind, describe_ret
from ge_python_backend.ops.conformance.atc import Atc
from ge_python_backend.ops.conformance.build import BuiltModels

Outcome = Literal["pass", "fail", "skip"]
EngineName = Literal["acl", "acl-sim"]


class _Unknown:
    """No source states the value: observed and recorded, never compared."""

    def __repr__(self) -> str:
        return "unknown"


UNKNOWN: Any = _Unknown()
_SAME: Any = object()


class Skip(Exception):  # noqa: N818 - a probe's way to say why it cannot run here
    """The probe cannot run here; the message says why."""


class ProbeFailure(Exception):  # noqa: N818 - a failed outcome, not an error of conformance itself
    """A call the probe needed to succeed did not."""


def plain(value: Any) -> Any:
    """``value`` as JSON would hold it (tuples as lists, numpy scalars as numbers), so equal
    answers compare equal whatever container the binding used."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class Check:
    """One value a probe looked at."""

    name: str
    observed: Any
    claimed: Any
    simulated: Any
    note: str = ""

    def target(self, simulator: bool) -> Any:
        return self.simulated if simulator else self.claimed

    def holds(self, simulator: bool) -> bool | None:
        target = self.target(simulator)
        return None if target is UNKNOWN else plain(self.observed) == plain(target)

    def to_json(self, simulator: bool) -> dict[str, Any]:
        found: dict[str, Any] = {"name": self.name, "observed": _shown(self.observed)}
        found["claimed"] = "unknown" if self.claimed is UNKNOWN else _shown(self.claimed)
        if self.simulated is not self.claimed:
            found["simulated"] = _shown(self.simulated)
        found["holds"] = self.holds(simulator)
        if self.note:
            found["note"] = self.note
        return found


def _shown(value: Any) -> Any:
    """``value`` for the JSON report (its repr when JSON cannot hold it)."""
    shown = plain(value)
    try:
        json.dumps(shown)
    except (TypeError, ValueError):
        return repr(value)
    return shown


#: when a probe runs: "first" in a process where nothing initialised pyACL (and before any model
#: loads: acl.prof.init must precede loads), "main", or "last" (after models have run)
Phase = Literal["first", "main", "last"]


@dataclass(frozen=True)
class Probe:
    id: str
    rows: tuple[str, ...]
    title: str
    run: Callable[[ProbeContext], None]
    #: exhausts a device resource for a moment (streams, events): only with --exhaust
    exhausts: bool = False
    phase: Phase = "main"


@dataclass
class ProbeResult:
    id: str
    rows: tuple[str, ...]
    title: str
    outcome: Outcome
    reason: str = ""
    checks: list[Check] = field(default_factory=list)

    def to_json(self, simulator: bool) -> dict[str, Any]:
        return {
            "id": self.id,
            "rows": list(self.rows),
            "title": self.title,
            "outcome": self.outcome,
            "reason": self.reason,
            "checks": [c.to_json(simulator) for c in self.checks],
        }

    def summary(self, simulator: bool) -> str:
        """One line: the reason of a skip, or for a failure what was observed against what was claimed."""
        if self.outcome != "fail":
            return self.reason
        wrong = [c for c in self.checks if c.holds(simulator) is False]
        shown = "; ".join(
            f"{c.name}: observed {_shown(c.observed)!r}, claimed {_shown(c.target(simulator))!r}" for c in wrong
        )
        return "; ".join(p for p in (self.reason, shown) if p)


#: every probe, in the order they run (the init probes first: they need a fresh process)
PROBES: list[Probe] = []


def probe(
    probe_id: str, rows: str, title: str, exhausts: bool = False, phase: Phase = "main"
) -> Callable[[Callable], Callable]:
    """Register ``probe_id`` for the fidelity.md ``rows`` (comma-separated numbers)."""

    def register(function: Callable[[ProbeContext], None]) -> Callable[[ProbeContext], None]:
        assert all(p.id != probe_id for p in PROBES), f"probe {probe_id} registered twice"
        row_ids = tuple(r.strip() for r in rows.split(","))
        PROBES.append(Probe(probe_id, row_ids, title, function, exhausts, phase))
        return function

    return register


def ordered(probes: list[Probe]) -> list[Probe]:
    """``probes`` in the order they must run: by phase, then as registered."""
    rank = {"first": 0, "main": 1, "last": 2}
    return sorted(probes, key=lambda p: rank[p.phase])


def close(observed: np.ndarray, expected: np.ndarray) -> bool:
    """Within FP16 accuracy of ONNX Runtime's FP32 (ATC may compile in FP16, e.g. force_fp16 on 310P)."""
    scale = float(np.abs(expected).max()) + 1.0
    return observed.shape == expected.shape and float(np.abs(observed - expected).max()) <= 1e-2 * scale


@dataclass
class Loaded:
    """A model loaded by a probe: its id and its desc (filled by get_desc)."""

    model_id: int
    desc: int
    path: Path


@dataclass
class Dataset:
    """A dataset with one device buffer per entry: ``handle``, the buffers' addresses and sizes."""

    handle: int
    addresses: list[int]
    sizes: list[int]


class ProbeContext:
    """What one probe runs with: the pyACL module, the device, the built models, and the releases
    due when it ends."""

    def __init__(
        self,
        acl: Any,
        engine: EngineName,
        device: int,
        models: BuiltModels,
        workdir: Path,
        exhaust: bool,
        atc: Atc | None = None,
    ) -> None:
        self.acl = acl
        self.engine = engine
        self.device = device
        self.models = models
        self.workdir = workdir
        self.exhaust = exhaust
        #: the ATC the probes of ATC's own rules run (None: there is none here)
        self.atc = atc
        self.checks: list[Check] = []
        self._device_mode: bool | None = None
        self._releases: list[tuple[str, Callable[[], Any]]] = []

    @property
    def simulator(self) -> bool:
        return self.engine == "acl-sim"

    def built_by_the_atc_under_test(self, name: str) -> None:
        """Skip when model ``name`` was compiled by another ATC than the one the ATC rows hold
        (``atc``): on acl-sim the models are compiled by the simulator's ATC whatever ``--atc``
        says, and a row must not pass for an ATC that did not run."""
        found = self.models.models.get(name)
        if found is not None and found.atc and self.atc is not None and found.atc != self.atc.name:
            raise Skip(
                f"model {name!r} was compiled by {found.atc}, not by {self.atc.name} (--atc), which this row checks; "
                "with --engine acl the models are compiled by it"
            )

    # --- recording ------------------------------------------------------------------------------

    def expect(self, name: str, observed: Any, claimed: Any, *, simulated: Any = _SAME, note: str = "") -> None:
        """Record ``observed`` for ``name`` against the row's ``claimed`` value (UNKNOWN: no source
        states it) and, where the simulator deliberately differs, its ``simulated`` answer."""
        self.checks.append(Check(name, observed, claimed, claimed if simulated is _SAME else simulated, note))

    def need(self, ret: int, function: str) -> None:
        """A call the probe relies on: anything but success fails the probe, naming it."""
        if ret != ACL_SUCCESS:
            raise ProbeFailure(f"{function} returned {describe_ret(ret)}")

    def at_exit(self, function: str, release: Callable[..., Any], *arguments: Any) -> None:
        """Call ``release(*arguments)`` (a pyACL call returning its ret, or None) when the probe ends."""
        self._releases.append((function, functools.partial(release, *arguments)))

    def keep(self, ret: int, function: str, release: Callable[..., Any], *arguments: Any) -> int:
        """``ret`` of a call that made something; when it succeeded, ``release(*arguments)`` at the end."""
        if ret == ACL_SUCCESS:
            self.at_exit(function, release, *arguments)
        return ret

    def release(self) -> list[str]:
        """Run the releases, last first; what failed."""
        failed = []
        while self._releases:
            function, release = self._releases.pop()
            try:
                ret = release()
            except Exception as exc:  # a broken binding must not stop the other releases
                failed.append(f"{function} raised {exc!r}")
                continue
            if ret not in (None, ACL_SUCCESS):
                failed.append(f"{function} returned {describe_ret(ret)}")
        return failed

    # --- resources ------------------------------------------------------------------------------

    def reference(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX Runtime on model ``name``'s ONNX file: what the device must answer."""
        from ge_python_backend.testing.models import reference

        return reference(self.models.models[name].onnx, feeds)

    def model(self, name: str) -> Path:
        found = self.models.om(name)
        if found is None:
            raise Skip(self.models.why_missing(name))
        return found

    def open_device(self) -> int:
        """set_device and a context of the probe's own; returns the context."""
        acl = self.acl
        self.need(acl.rt.set_device(self.device), "acl.rt.set_device")
        self.at_exit("acl.rt.reset_device", acl.rt.reset_device, self.device)
        context, ret = acl.rt.create_context(self.device)
        self.need(ret, "acl.rt.create_context")
        self.at_exit("acl.rt.destroy_context", acl.rt.destroy_context, context)
        return context

    def stream(self) -> int:
        acl = self.acl
        stream, ret = acl.rt.create_stream()
        self.need(ret, "acl.rt.create_stream")
        self.at_exit("acl.rt.destroy_stream", acl.rt.destroy_stream, stream)
        return stream

    def event(self) -> int:
        acl = self.acl
        event, ret = acl.rt.create_event()
        self.need(ret, "acl.rt.create_event")
        self.at_exit("acl.rt.destroy_event", acl.rt.destroy_event, event)
        return event

    def malloc(self, size: int) -> int:
        acl = self.acl
        ptr, ret = acl.rt.malloc(size, MallocPolicy.HUGE_FIRST)
        self.need(ret, "acl.rt.malloc")
        self.at_exit("acl.rt.free", acl.rt.free, ptr)
        return ptr

    def malloc_host(self, size: int) -> int:
        acl = self.acl
        ptr, ret = acl.rt.malloc_host(size)
        self.need(ret, "acl.rt.malloc_host")
        self.at_exit("acl.rt.free_host", acl.rt.free_host, ptr)
        return ptr

    def load(self, name: str) -> Loaded:
        """``name``'s model with load_from_file, and its desc."""
        acl = self.acl
        path = self.model(name)
        model_id, ret = acl.mdl.load_from_file(str(path))
        self.need(ret, f"acl.mdl.load_from_file({path.name})")
        self.at_exit("acl.mdl.unload", acl.mdl.unload, model_id)
        return Loaded(model_id, self.desc_of(model_id), path)

    def desc_of(self, model_id: int) -> int:
        acl = self.acl
        desc = acl.mdl.create_desc()
        if not desc:
            raise ProbeFailure("acl.mdl.create_desc returned NULL")
        self.at_exit("acl.mdl.destroy_desc", acl.mdl.destroy_desc, desc)
        self.need(acl.mdl.get_desc(desc, model_id), "acl.mdl.get_desc")
        return desc

    def input_index(self, loaded: Loaded, name: str) -> int:
        index, ret = self.acl.mdl.get_input_index_by_name(loaded.desc, name)
        self.need(ret, f"acl.mdl.get_input_index_by_name({name})")
        return int(index)

    def input_dims(self, loaded: Loaded, index: int) -> tuple[list[int], list[int]]:
        """V1 and V2 dims of input ``index`` (get_input_dims, get_input_dims_v2)."""
        acl = self.acl
        v1, ret = acl.mdl.get_input_dims(loaded.desc, index)
        self.need(ret, "acl.mdl.get_input_dims")
        v2, ret = acl.mdl.get_input_dims_v2(loaded.desc, index)
        self.need(ret, "acl.mdl.get_input_dims_v2")
        return list(v1.get("dims", [])), list(v2.get("dims", []))

    def dataset(self, sizes: list[int]) -> Dataset:
        """A dataset of device buffers of ``sizes`` bytes (0 for a buffer without memory)."""
        acl = self.acl
        handle = acl.mdl.create_dataset()
        if not handle:
            raise ProbeFailure("acl.mdl.create_dataset returned NULL")
        self.at_exit("acl.mdl.destroy_dataset", acl.mdl.destroy_dataset, handle)
        addresses = []
        for size in sizes:
            ptr = self.malloc(size) if size else 0
            buffer = acl.create_data_buffer(ptr, size)
            if not buffer:
                raise ProbeFailure("acl.create_data_buffer returned NULL")
            self.at_exit("acl.destroy_data_buffer", acl.destroy_data_buffer, buffer)
            _, ret = acl.mdl.add_dataset_buffer(handle, buffer)
            self.need(ret, "acl.mdl.add_dataset_buffer")
            addresses.append(ptr)
        return Dataset(handle, addresses, list(sizes))

    def io(self, loaded: Loaded, sizes: dict[tuple[str, int], int] | None = None) -> tuple[Dataset, Dataset]:
        """Input and output datasets of ``loaded``, each buffer of the size the desc gives (at least 1
        byte) unless ``sizes`` says otherwise: ("input" | "output", index) -> bytes."""
        acl, desc, sizes = self.acl, loaded.desc, sizes or {}
        counts = {"input": acl.mdl.get_num_inputs(desc), "output": acl.mdl.get_num_outputs(desc)}
        size_of = {"input": acl.mdl.get_input_size_by_index, "output": acl.mdl.get_output_size_by_index}
        made = [
            self.dataset([sizes.get((kind, i), max(size_of[kind](desc, i), 1)) for i in range(counts[kind])])
            for kind in ("input", "output")
        ]
        return made[0], made[1]

    def tensor_desc(self, dtype: int, dims: list[int], fmt: int) -> int:
        acl = self.acl
        desc = acl.create_tensor_desc(dtype, dims, fmt)
        if not desc:
            raise ProbeFailure("acl.create_tensor_desc returned NULL")
        self.at_exit("acl.destroy_tensor_desc", acl.destroy_tensor_desc, desc)
        return desc

    @property
    def device_run_mode(self) -> bool:
        """The application runs on the device (ACL_DEVICE): device memory is host-addressable."""
        if self._device_mode is None:
            mode, ret = self.acl.rt.get_run_mode()
            self.need(ret, "acl.rt.get_run_mode")
            self._device_mode = int(mode) == ACL_DEVICE
        return self._device_mode

    def write(self, address: int, array: np.ndarray) -> None:
        """``array``'s bytes into device memory at ``address`` (a synchronous copy on a PCIe host)."""
        data = np.ascontiguousarray(array)
        if self.device_run_mode:
            ctypes.memmove(address, data.ctypes.data, data.nbytes)
            return
        ret = self.acl.rt.memcpy(address, data.nbytes, data.ctypes.data, data.nbytes, MemcpyKind.HOST_TO_DEVICE)
        self.need(ret, "acl.rt.memcpy (host to device)")

    def read(self, address: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """An array of ``shape`` from device memory at ``address``."""
        found = np.empty(shape, dtype)
        if self.device_run_mode:
            ctypes.memmove(found.ctypes.data, address, found.nbytes)
            return found
        ret = self.acl.rt.memcpy(found.ctypes.data, found.nbytes, address, found.nbytes, MemcpyKind.DEVICE_TO_HOST)
        self.need(ret, "acl.rt.memcpy (device to host)")
        return found

    def file(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.write_text(text, encoding="utf-8")
        return path


def run_probe(probe: Probe, context: ProbeContext) -> ProbeResult:
    """Run one probe and release what it made; its outcome."""
    result = ProbeResult(probe.id, probe.rows, probe.title, "pass")
    if probe.exhausts and not context.exhaust:
        result.outcome, result.reason = (
            "skip",
            "exhausts a device resource for a moment: run with --exhaust on an idle device",
        )
        return result
    try:
        probe.run(context)
    except Skip as exc:
        result.outcome, result.reason = "skip", str(exc)
    except ProbeFailure as exc:
        result.outcome, result.reason = "fail", str(exc)
    except Exception as exc:  # an exception from the binding is an observation too
        last = traceback.extract_tb(exc.__traceback__)[-1]
        result.outcome, result.reason = "fail", f"raised {exc!r} at {Path(last.filename).name}:{last.lineno}"
    failed = context.release()
    result.checks = context.checks
    if failed:
        result.outcome = "fail"
        result.reason = "; ".join(p for p in (result.reason, "release: " + "; ".join(failed)) if p)
    if result.outcome == "pass":
        held = [c.holds(context.simulator) for c in result.checks]
        if not result.checks:
            result.outcome, result.reason = "fail", "the probe recorded nothing"
        elif False in held:
            result.outcome = "fail"
        elif all(h is None for h in held):
            result.outcome = "skip"
            result.reason = "records only: no source states what CANN answers here; the observed values are in the JSON"
    return result


def raised(call: Callable[[], Any]) -> str:
    """The name of the exception ``call`` raised ("" when it returned): for the binding's own checks."""
    try:
        call()
    except Exception as exc:
        return type(exc).__name__
    return ""
