"""Hours of load with nothing growing: what a served model's processes hold over a long soak,
and the bounds it must stay within.

``run_endurance`` drives one model of a supervised tritonserver (``SupervisedServer``) through
three phases, with every answer checked by ``ops.soak`` (good requests against the reference,
bad ones refused):

1. ``requests``: that many requests, ``bad_share`` of them bad;
2. ``cycles``: under background load, that many times: unload the model, load it, reload it in
   place (``TritonServer.reload``);
3. ``kills``: under background load, that many times: SIGKILL the model's stubs and wait for
   the supervisor to bring it back.

Along the way it samples (``Sample``) tritonserver's and the model's stubs' resident memory,
open file descriptors and threads (``ops.processes.usage``), the server's shared memory (its
regions' files in /dev/shm, and what it maps of /dev/shm, removed files included) and, on the
simulator, the device memory the model's stubs hold (``ge_device_memory_bytes``). ``judge``
holds the samples to ``Bounds``: after the warm-up, resident memory grows less than
``rss_per_100k`` per 100,000 requests (least-squares slope over the samples, tritonserver and
stubs apart), file descriptors, threads and shared-memory files do not grow, the device memory
of every load is what the first load held, and every stub that ended released every simulated
resource (the simulator's ledger file, ``GE_ACL_SIM_LEDGER_FILE``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ge_python_backend.ops.bench.metrics import Scrape
from ge_python_backend.ops.processes import NOTHING, Usage, stubs_of, usage
from ge_python_backend.ops.soak import Reference, SoakReport, SoakSettings, run_soak
from ge_python_backend.ops.supervised import SupervisedServer
from ge_python_backend.triton.metrics import DEVICE_MEMORY

MIB = 1 << 20
SHM = Path("/dev/shm")
#: the first line of a mapping in /proc/PID/smaps: "start-end perms offset dev inode [path]"
_MAPPING = re.compile(r"[0-9a-f]+-[0-9a-f]+ ")


@dataclass(frozen=True)
class Sample:
    """One reading, ``at`` requests (or cycles, or kills) into a phase."""

    at: int
    #: tritonserver's pid (another one after a restart)
    server_pid: int
    server: Usage
    stubs: Usage
    stub_count: int
    #: bytes of the server's region files in /dev/shm
    shm_files: int
    #: bytes of /dev/shm the server maps, regions already removed included
    shm_mapped: int
    #: simulated device memory the model's stubs hold (0 off the NPU)
    device: int
    #: stubs that have reported their device memory
    device_stubs: int = 0


def sample(served: SupervisedServer, model: str, at: int) -> Sample:
    server = served.server
    process = server.process
    pid = process.pid if process is not None else 0
    stubs = [s for s in stubs_of(pid) if s.model == model]
    total = NOTHING
    for stub in stubs:
        total = total + (usage(stub.pid) or NOTHING)
    return Sample(
        at=at,
        server_pid=pid,
        server=usage(pid) or NOTHING,
        stubs=total,
        stub_count=len(stubs),
        shm_files=_shm_files(server.shm_prefix),
        shm_mapped=_shm_mapped(pid),
        **_device_used(server.scrape(), {s.pid for s in stubs}),
    )


def _settled(served: SupervisedServer, model: str, at: int, timeout: float = 20.0) -> Sample:
    """A sample once every stub of a fresh load of a device model has reported its device memory
    (each reads it at a metrics flush, every DEVICE_MEMORY_INTERVAL)."""
    started = time.monotonic()
    while True:
        now = sample(served, model, at)
        if now.device_stubs == now.stub_count or time.monotonic() - started > timeout:
            return now
        time.sleep(0.5)


def _shm_files(prefix: str) -> int:
    found = 0
    for entry in SHM.iterdir():
        if entry.name.startswith(prefix):
            try:
                found += entry.stat().st_blocks * 512
            except OSError:
                continue
    return found


def _shm_mapped(pid: int) -> int:
    """Resident bytes of the /dev/shm mappings of ``pid`` (/proc/PID/smaps)."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return 0
    found, inside = 0, False
    for line in text.splitlines():
        if _MAPPING.match(line):
            inside = " /dev/shm/" in line
        elif inside and line.startswith("Rss:"):
            found += int(line.split()[1]) * 1024
    return found


def _device_used(scrape: Scrape | None, pids: set[int]) -> dict[str, int]:
    if scrape is None:
        return {"device": 0, "device_stubs": 0}
    per_pid: dict[int, dict[str, float]] = {}
    for (name, labels), value in scrape.samples.items():
        found = dict(labels)
        if name == DEVICE_MEMORY and found.get("pid", "").isdigit() and int(found["pid"]) in pids:
            per_pid.setdefault(int(found["pid"]), {})[found.get("kind", "")] = value
    read = [kinds for kinds in per_pid.values() if kinds.get("total", 0) > 0]  # 0 until a stub's first reading
    used = int(sum(kinds["total"] - kinds.get("free", 0) for kinds in read))
    return {"device": used, "device_stubs": len(read)}


@dataclass(frozen=True)
class Bounds:
    """What a long run must stay within after its warm-up."""

    rss_per_100k: int = 10 * MIB
    #: share of the requests phase before the bounds apply (allocators, caches and pools fill up) ...
    warmup: float = 0.2
    #: ... and at least this many requests
    warmup_requests: int = 5000
    #: requests after the warm-up below which the RSS slope is measured, not judged: over fewer,
    #: an allocator's ups and downs of a few MiB extrapolate past any bound
    judged_from: int = 50_000
    #: what "flat" lets a count grow by: a pool that starts a thread on demand is no leak; one
    #: thread or descriptor per request, cycle or kill soon is
    flat_slack: int = 2


@dataclass(frozen=True)
class Finding:
    """One bound checked: what was measured against what is allowed."""

    phase: str
    what: str
    measured: str
    allowed: str
    ok: bool

    def line(self) -> str:
        return f"  {'ok  ' if self.ok else 'FAIL'} {self.phase:8} {self.what:34} {self.measured:>24}   {self.allowed}"


@dataclass
class EndurancePlan:
    """How long each phase runs, and the load."""

    requests: int = 200_000
    cycles: int = 100
    kills: int = 20
    bad_share: float = 0.1
    concurrency: int = 64
    #: concurrency of the background load during cycles and kills
    background: int = 16
    samples: int = 40
    seed: int = 0
    #: the simulator's ledger file the server's stubs write (None: not checked)
    ledger: Path | None = None
    #: the model holds device memory (``ge_device_memory_bytes``): each load's is compared
    device: bool = False
    #: seconds a load, reload or recovery may take
    settle_s: float = 120.0
    #: seconds a recovered model serves before the next kill: past the supervisor's settle_s, so
    #: each kill is a first failure, not one more in a row (which it gives up on)
    kill_pause_s: float = 0.0


@dataclass
class EnduranceReport:
    model: str
    soaks: dict[str, SoakReport] = field(default_factory=dict)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def describe(self) -> str:
        lines = [f"{self.model}: {'within bounds' if self.ok else 'OUT OF BOUNDS'}"]
        for phase, report in self.soaks.items():
            lines.append(f"  {phase} ({self.seconds.get(phase, 0):.0f} s): {report.describe()}")
        lines += [f.line() for f in self.findings]
        return "\n".join(lines)


def run_endurance(
    served: SupervisedServer,
    model: str,
    reference: Reference,
    plan: EndurancePlan,
    bounds: Bounds = Bounds(),
    log: Callable[[str], None] = print,
) -> EnduranceReport:
    """The three phases on ``model``; the report with every bound judged."""
    report = EnduranceReport(model)
    url = served.server.grpc_address
    started = time.monotonic()
    ledger_start = _ledger_lines(plan.ledger)

    # 1. requests, sampled as they are answered
    samples: list[Sample] = [sample(served, model, 0)]
    every = max(1, plan.requests // plan.samples)
    settings = SoakSettings(
        requests=plan.requests,
        concurrency=plan.concurrency,
        bad_share=plan.bad_share,
        seed=plan.seed,
        time_limit_s=24 * 3600.0,
        progress=lambda answered: samples.append(sample(served, model, answered)),
        progress_every=every,
    )
    report.soaks["requests"] = run_soak(url, model, reference, settings)
    samples.append(sample(served, model, plan.requests))
    report.samples["requests"] = samples
    report.seconds["requests"] = time.monotonic() - started
    log(f"{model}: requests done in {report.seconds['requests']:.0f} s")

    # 2. unload, load, reload under load
    started = time.monotonic()
    cycles: list[Sample] = []
    loads: list[Sample] = []
    with _Background(url, model, reference, plan) as background:
        for cycle in range(plan.cycles):
            _unload(served, model, plan)
            _load(served, model, plan)
            loads.append(_settled(served, model, cycle) if plan.device else sample(served, model, cycle))
            _reload(served, model, plan)
            cycles.append(sample(served, model, cycle + 1))
    report.soaks["cycles"] = background.report
    report.samples["cycles"] = cycles
    report.samples["loads"] = loads
    report.seconds["cycles"] = time.monotonic() - started
    log(f"{model}: {plan.cycles} unload/load/reload cycles done in {report.seconds['cycles']:.0f} s")

    # 3. kills, each recovered by the supervisor
    started = time.monotonic()
    kills: list[Sample] = [sample(served, model, 0)]
    with _Background(url, model, reference, plan) as background:
        for kill in range(plan.kills):
            _kill_and_wait(served, model, plan)
            kills.append(sample(served, model, kill + 1))
            time.sleep(plan.kill_pause_s)
    report.soaks["kills"] = background.report
    report.samples["kills"] = kills
    report.seconds["kills"] = time.monotonic() - started
    log(f"{model}: {plan.kills} kills recovered in {report.seconds['kills']:.0f} s")

    report.findings = judge(report, bounds, _ledger_lines(plan.ledger)[len(ledger_start) :] if plan.ledger else None)
    return report


class _Background:
    """Requests to ``model`` on a thread of their own until the block ends."""

    def __init__(self, url: str, model: str, reference: Reference, plan: EndurancePlan) -> None:
        self._stop = threading.Event()
        settings = SoakSettings(
            requests=10**9,
            concurrency=plan.background,
            # unary calls only: tritonserver 2.51 keeps an unloaded model (and its stubs) while gRPC
            # streams keep sending to it, so an unload under streaming load does not end (measured)
            stream_share=0.0,
            bad_share=plan.bad_share,
            seed=plan.seed + 1,
            time_limit_s=24 * 3600.0,
            deadline_s=plan.settle_s,
            stop=self._stop,
            errors_allowed=True,
        )
        self._thread = threading.Thread(target=self._run, args=(url, model, reference, settings), daemon=True)
        self.report = SoakReport(model, 0, errors_allowed=True)

    def _run(self, url: str, model: str, reference: Reference, settings: SoakSettings) -> None:
        self.report = run_soak(url, model, reference, settings)

    def __enter__(self) -> _Background:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:g} s")
        time.sleep(0.1)


def _model_stubs(served: SupervisedServer, model: str) -> set[int]:
    process = served.server.process
    return {s.pid for s in stubs_of(process.pid) if s.model == model} if process is not None else set()


def _unload(served: SupervisedServer, model: str, plan: EndurancePlan) -> None:
    status, body = served.server.repository_call("unload", model, plan.settle_s)
    if status != 200:
        raise RuntimeError(f"unload {model}: HTTP {status}: {body}")
    _wait(lambda: not _model_stubs(served, model), plan.settle_s, f"{model}'s stubs still run after its unload")


def _load(served: SupervisedServer, model: str, plan: EndurancePlan) -> None:
    status, body = served.server.repository_call("load", model, plan.settle_s)
    if status != 200:
        raise RuntimeError(f"load {model}: HTTP {status}: {body}")


def _reload(served: SupervisedServer, model: str, plan: EndurancePlan) -> None:
    old = _model_stubs(served, model)
    status, body = served.server.reload(model, f"endurance {time.time_ns()}", plan.settle_s)
    if status != 200:
        raise RuntimeError(f"reload {model}: HTTP {status}: {body}")
    _wait(lambda: not old & _model_stubs(served, model), plan.settle_s, f"{model}'s old stubs still run")


def _kill_and_wait(served: SupervisedServer, model: str, plan: EndurancePlan) -> None:
    supervisor = served.supervisor
    before = supervisor.status()["models"].get(model, {}).get("recoveries", 0)
    victims = _model_stubs(served, model)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)

    def recovered() -> bool:
        models = supervisor.status()["models"]
        state = models.get(model, {})
        # and every other model back: a restart of tritonserver brings the model back first, the others after it
        return state.get("recoveries", 0) > before and all(m["healthy"] for m in models.values())

    _wait(recovered, plan.settle_s, f"{model} not recovered")


def _ledger_lines(path: Path | None) -> list[dict]:
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the bounds -------------------------------------------------------------------------------------


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``points`` (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / spread if spread else 0.0


def flat(values: Sequence[int], slack: int = 0) -> tuple[bool, str]:
    """Whether ``values`` do not grow: the last third's largest exceeds the first third's by
    ``slack`` at most (counts that come and go, as threads of a pool, stay flat)."""
    third = max(1, len(values) // 3)
    first, last = max(values[:third]), max(values[-third:])
    return last <= first + slack, f"{first} -> {last}"


def judge(report: EnduranceReport, bounds: Bounds, ledger: list[dict] | None) -> list[Finding]:
    found: list[Finding] = []
    requests = report.samples["requests"]
    warm = [s for s in requests if s.at >= max(bounds.warmup * requests[-1].at, bounds.warmup_requests)]
    span = warm[-1].at - warm[0].at if len(warm) > 1 else 0
    for who, rss in (("tritonserver", lambda s: s.server.rss_bytes), ("stubs", lambda s: s.stubs.rss_bytes)):
        growth = slope([(s.at, rss(s)) for s in warm]) * 100_000
        measured = f"{growth / MIB:+.2f} MiB" if len(warm) > 2 else "no samples"
        allowed = f"< {bounds.rss_per_100k / MIB:g} MiB"
        if span < bounds.judged_from:
            allowed = f"not judged: {span} requests after warm-up (from {bounds.judged_from})"
        ok = span < bounds.judged_from or growth < bounds.rss_per_100k
        found.append(Finding("requests", f"{who} RSS per 100,000 requests", measured, allowed, ok))
    phases = (("requests", warm), ("cycles", report.samples["cycles"]), ("kills", report.samples["kills"]))
    for phase, samples in phases:
        if len(samples) < 2:
            continue
        for what, values in (
            ("tritonserver fds", [s.server.fds for s in samples]),
            ("tritonserver threads", [s.server.threads for s in samples]),
            ("stub fds", [s.stubs.fds for s in samples]),
            ("stub threads", [s.stubs.threads for s in samples]),
            ("/dev/shm files (bytes)", [s.shm_files for s in samples]),
        ):
            slack = 0 if what.startswith("/dev/shm") else bounds.flat_slack
            if phase == "kills" and what.startswith("tritonserver"):
                found.append(_after_restarts(what, samples, values, slack))
                continue
            ok, text = flat(values, slack)
            found.append(Finding(phase, what, text, f"flat (+{slack})" if slack else "flat", ok))
        if phase != "requests":
            per = slope([(s.at, s.server.rss_bytes) for s in samples])
            mapped = slope([(s.at, s.shm_mapped) for s in samples])
            unit = "cycle" if phase == "cycles" else "kill"
            found.append(Finding(phase, f"tritonserver RSS per {unit}", f"{per / MIB:+.2f} MiB", "measured", True))
            found.append(Finding(phase, f"/dev/shm mapped per {unit}", f"{mapped / MIB:+.2f} MiB", "measured", True))
    loads = report.samples.get("loads", [])
    if loads and any(s.device_stubs for s in loads):
        devices = sorted({s.device for s in loads})
        measured = " / ".join(str(d) for d in devices)
        unread = sum(s.device_stubs != s.stub_count for s in loads)
        ok = len(devices) == 1 and not unread
        found.append(Finding("cycles", "device memory of each load (bytes)", measured, "the same", ok))
    counts = {s.stub_count for s in report.samples["cycles"] + report.samples["kills"]}
    found.append(
        Finding("cycles", "stubs after each cycle and kill", str(sorted(counts)), "one count", len(counts) == 1)
    )
    if ledger is not None:  # a model on the simulator: its stubs must have written their lines
        leftovers = [line for line in ledger if line.get("live")]
        found.append(
            Finding(
                "all",
                "stubs that ended with live resources",
                f"{len(leftovers)} of {len(ledger)}",
                "0",
                not leftovers and bool(ledger),
            )
        )
    for phase, soak_report in report.soaks.items():
        found.append(
            Finding(
                phase,
                "answers",
                f"{soak_report.verified} right, {soak_report.refused} refused, {soak_report.errored} errors",
                "none wrong, lost or twice" if soak_report.errors_allowed else "all right or refused",
                soak_report.ok,
            )
        )
    return found


def _after_restarts(what: str, samples: Sequence[Sample], values: Sequence[int], slack: int) -> Finding:
    """tritonserver's count over the kills: the Python backend keeps each dead stub's instance
    (threads, a descriptor) until the server exits, so it grows with each kill until serve's
    dead-stub budget restarts the server; right after each restart it must be back at the start."""
    first = values[0]
    restarted = [v for s, v, prev in zip(samples[1:], values[1:], samples) if s.server_pid != prev.server_pid]
    grown = f"{first} -> max {max(values)}"
    if not restarted:
        return Finding("kills", what, grown, "measured (no restart: within the dead-stub budget)", True)
    ok = max(restarted) <= first + slack
    return Finding("kills", what, f"{grown}, after restarts {max(restarted)}", f"back to {first} (+{slack})", ok)
