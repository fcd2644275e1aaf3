"""The endurance soak's bounds on made-up samples: each can fail, and what stays flat passes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ge_python_backend.ops.endurance import MIB, Bounds, EnduranceReport, Sample, flat, judge, slope
from ge_python_backend.ops.processes import Usage
from ge_python_backend.ops.soak import SoakReport

BOUNDS = Bounds(warmup=0.2, warmup_requests=0, judged_from=50_000)


def reading(at: int, rss: int = 100 * MIB, fds: int = 70, threads: int = 200, pid: int = 1, device: int = 0) -> Sample:
    return Sample(
        at=at,
        server_pid=pid,
        server=Usage(rss, fds, threads),
        stubs=Usage(50 * MIB, 30, 9),
        stub_count=1,
        shm_files=16 * MIB,
        shm_mapped=0,
        device=device,
        device_stubs=1 if device else 0,
    )


def report(requests=None, cycles=None, kills=None, loads=()) -> EnduranceReport:
    built = EnduranceReport("m")
    built.samples = {
        "requests": requests or [reading(at) for at in range(0, 200_001, 10_000)],
        "cycles": cycles or [reading(at) for at in range(10)],
        "kills": kills or [reading(at) for at in range(5)],
        "loads": list(loads),
    }
    built.soaks = {
        "requests": replace(SoakReport("m", 10, sent=10, verified=8, refused=2)),
        "cycles": SoakReport("m", 10, errors_allowed=True, sent=10, verified=5, errored=5),
        "kills": SoakReport("m", 10, errors_allowed=True, sent=10, verified=5, errored=5),
    }
    return built


def failed(built: EnduranceReport, ledger=None) -> list[str]:
    return [f"{f.phase} {f.what}" for f in judge(built, BOUNDS, ledger) if not f.ok]


def test_nothing_growing_is_within_bounds():
    assert failed(report()) == []


def test_rss_growing_past_the_bound_per_100k_requests_fails_once_the_run_is_long_enough():
    growing = [reading(at, rss=100 * MIB + at * 12 * MIB // 100_000) for at in range(0, 200_001, 10_000)]
    assert failed(report(requests=growing)) == ["requests tritonserver RSS per 100,000 requests"]
    short = [s for s in growing if s.at <= 40_000]
    findings = judge(report(requests=short), BOUNDS, None)
    (rss,) = [f for f in findings if f.what == "tritonserver RSS per 100,000 requests"]
    assert rss.ok and rss.allowed.startswith("not judged: 30000 requests after warm-up")


def test_a_descriptor_per_cycle_fails():
    leaking = [reading(at, fds=70 + at) for at in range(10)]
    assert failed(report(cycles=leaking)) == ["cycles tritonserver fds"]


def test_threads_a_dead_stub_leaves_must_be_gone_after_the_restart():
    grows = [reading(0), reading(1, threads=236), reading(2, threads=272)]
    assert failed(report(kills=grows)) == []  # no restart: measured only
    back = [*grows, reading(3, threads=201, pid=2)]
    assert failed(report(kills=back)) == []
    kept = [*grows, reading(3, threads=240, pid=2)]
    assert failed(report(kills=kept)) == ["kills tritonserver threads"]


def test_device_memory_must_be_the_same_at_every_load_and_the_ledger_empty():
    loads = [reading(0, device=6466), reading(1, device=6466 + 512)]
    assert failed(report(loads=loads)) == ["cycles device memory of each load (bytes)"]
    ledger = [{"live": []}, {"live": ["stream 0x1"]}]
    assert failed(report(), ledger) == ["all stubs that ended with live resources"]


def test_a_wrong_answer_fails_its_phase_and_errors_only_where_allowed():
    built = report()
    built.soaks["requests"].errored = 1
    built.soaks["kills"].wrong = 1
    assert failed(built) == ["requests answers", "kills answers"]


@pytest.mark.parametrize(("values", "grows"), [([5, 6, 5, 6, 5, 6], False), ([5, 5, 6, 7, 8, 9], True)])
def test_flat_lets_counts_come_and_go_but_not_climb(values, grows):
    assert flat(values, slack=0)[0] is not grows


def test_slope_is_least_squares():
    assert slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == pytest.approx(2.0)
    assert slope([(0, 1.0)]) == 0.0
