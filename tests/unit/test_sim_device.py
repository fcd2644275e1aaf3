"""The simulated NPU: one device per id, its cores and copy engines shared by every stream and
process that uses it (sim/device.py, hostshm.py).

The booking arithmetic is checked against a brute-force reference (a time-stepped fluid
simulation written here); the simulator's streams against the modelled timestamps of events
(modelled time, not how fast this host ran the test); processes against each other through real
subprocesses.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ge_python_backend.hostshm import DIR_ENV, SCOPE_ENV, SharedRegion
from ge_python_backend.sim import Simulator, sim_compile
from ge_python_backend.sim.device import (
    CoreProfile,
    Demand,
    SharedDevice,
    StreamDevice,
    clock,
    execution_demand,
)
from tests.support import acl_sim_nets as nets

H2D, D2H, HUGE_FIRST = 1, 2, 0
#: modelled ms between submissions on a busy host (the cases differ by 100 ms or more)
SLACK = 30.0
ROOT = Path(__file__).resolve().parents[2]


# --- the booking arithmetic --------------------------------------------------------------------


def stepped(bookings: list[tuple[float, float, float]], capacity: int, step: float = 1e-4) -> list[float]:
    """Reference: the end of each (ready, rate, seconds) booking, simulated in steps of ``step``:
    at each step every booking, in booking order, takes what it asks of the cores the earlier ones
    left, until its work (rate * seconds core-seconds) is done."""
    left = [rate * seconds for _, rate, seconds in bookings]
    ends = [math.inf] * len(bookings)
    t = min(b[0] for b in bookings)
    while any(e == math.inf for e in ends):
        free = float(capacity)
        for i, (ready, rate, _) in enumerate(bookings):
            if ends[i] != math.inf or ready > t + 1e-12:
                continue
            take = min(rate, free)
            free -= take
            if take > 0 and left[i] <= take * step + 1e-12:
                ends[i] = t + left[i] / take
            left[i] -= take * step
        t += step
    return ends


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 20).map(lambda n: n / 1000),  # ready, s
            st.sampled_from([1, 2, 4, 8]),  # cores asked for
            st.integers(1, 10).map(lambda n: n / 1000),  # seconds
        ),
        min_size=1,
        max_size=6,
    )
)
def test_bookings_end_where_a_stepped_simulation_of_the_cores_ends_them(bookings):
    profile = CoreProfile()
    ends = [profile.book(ready, Demand(seconds, rate, 8))[1] for ready, rate, seconds in bookings]
    for got, want in zip(ends, stepped(bookings, 8)):
        assert got == pytest.approx(want, abs=3e-4)


def test_an_execution_that_uses_every_core_waits_for_the_one_before_it():
    profile = CoreProfile()
    assert profile.book(0.0, Demand(0.008, 8, 8)) == (0.0, 0.008)
    assert profile.book(0.001, Demand(0.008, 8, 8)) == pytest.approx((0.008, 0.016))
    assert profile.busy_between(0.0, 1.0) == pytest.approx((0.016, 0.128))


def test_executions_that_each_use_half_the_cores_run_side_by_side():
    profile = CoreProfile()
    assert profile.book(0.0, Demand(0.008, 4, 8)) == (0.0, 0.008)
    assert profile.book(0.001, Demand(0.008, 4, 8)) == pytest.approx((0.001, 0.009))
    assert profile.book(0.002, Demand(0.008, 4, 8)) == pytest.approx((0.008, 0.016))


def test_a_model_on_all_cores_runs_its_modelled_time_with_every_core_busy():
    assert execution_demand(0.008, 8, None, 1.0, 0.0) == Demand(0.008, 8.0, 8)
    assert execution_demand(0.008, 8, 8, 1.0, 0.3) == Demand(0.008, 8.0, 8)
    gappy = execution_demand(0.008, 8, None, 0.5, 0.0)
    assert (gappy.seconds, gappy.rate) == (0.008, 4.0)


def test_fewer_cores_stretch_the_compute_and_shorten_the_launch():
    # T(k) = d * ((1 - busy) + busy * (launch * k / C + (1 - launch) * C / k)), the k cores busy for the busy part
    half = execution_demand(0.010, 8, 4, 0.8, 0.25)
    busy = 0.010 * 0.8 * (0.25 * 0.5 + 0.75 * 2)
    assert half.seconds == pytest.approx(0.010 * 0.2 + busy)
    assert half.rate * half.seconds == pytest.approx(4 * busy)
    assert execution_demand(0.010, 8, 99, 1.0, 0.0).seconds == pytest.approx(0.010)  # no more than the device has


def throughput(demand: Demand, streams: int, executions: int = 40) -> float:
    """Executions per second of ``streams`` streams, each submitting its next as its last ends."""
    profile = CoreProfile()
    free = [0.0] * streams
    last = 0.0
    for n in range(executions):
        s = n % streams
        _, free[s] = profile.book(free[s], demand)
        last = max(last, free[s])
    return executions / last


@pytest.mark.parametrize(
    ("busy", "launch", "half_cores_win"),
    [
        (0.7, 0.7, True),  # a small model: launching cores is most of its busy time
        (0.7, 0.05, False),  # a large one: compute is
    ],
)
def test_two_streams_on_half_the_cores_beat_two_on_all_of_them_only_for_a_small_model(busy, launch, half_cores_win):
    full = throughput(execution_demand(0.010, 8, None, busy, launch), 2)
    half = throughput(execution_demand(0.010, 8, 4, busy, launch), 2)
    assert (half > full) is half_cores_win


# --- the simulator's streams on one device -----------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("simdev")
    onnx_path = nets.matmul_add(folder / "m.onnx")
    sim_compile(onnx_path, folder / "all.om", input_shapes={"x": (2, 4)})
    sim_compile(onnx_path, folder / "half.om", input_shapes={"x": (2, 4)}, aicore_num="4|")
    return folder


@pytest.fixture
def sim():
    simulator = Simulator()
    yield simulator
    simulator.reset()


class Copy:
    """A loaded model with its datasets and stream, in a context of its own on ``device``."""

    def __init__(self, acl, path: Path, device: int = 0) -> None:
        self.acl = acl
        self.context, _ = acl.rt.create_context(device)
        self.stream, _ = acl.rt.create_stream()
        self.model_id, ret = acl.mdl.load_from_file(str(path))
        assert ret == 0, acl.get_recent_err_msg()
        self.desc = acl.mdl.create_desc()
        acl.mdl.get_desc(self.desc, self.model_id)
        self.inputs, self.outputs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
        self.buffers = []
        for dataset, count, size_of in (
            (self.inputs, acl.mdl.get_num_inputs(self.desc), acl.mdl.get_input_size_by_index),
            (self.outputs, acl.mdl.get_num_outputs(self.desc), acl.mdl.get_output_size_by_index),
        ):
            for i in range(count):
                size = size_of(self.desc, i)
                ptr, _ = acl.rt.malloc(size, HUGE_FIRST)
                acl.rt.memset(ptr, size, 0, size)
                self.buffers.append((ptr, size))
                acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(ptr, size))
        self.before, _ = acl.rt.create_event()
        self.after, _ = acl.rt.create_event()

    def submit(self) -> None:
        acl = self.acl
        assert acl.rt.set_context(self.context) == 0
        assert acl.rt.record_event(self.before, self.stream) == 0
        assert acl.mdl.execute_async(self.model_id, self.inputs, self.outputs, self.stream) == 0
        assert acl.rt.record_event(self.after, self.stream) == 0

    def wait(self) -> None:
        acl = self.acl
        assert acl.rt.set_context(self.context) == 0
        assert acl.rt.synchronize_stream(self.stream) == 0, acl.get_recent_err_msg()


def run_together(copies: list[Copy]) -> list[float]:
    """Submit one execution on each copy's stream, then wait for all: the modelled ms from the
    first submission to each one's end (the events' modelled timestamps)."""
    for copy in copies:
        copy.submit()
    for copy in copies:
        copy.wait()
    acl = copies[0].acl
    ends = [acl.rt.event_elapsed_time(copies[0].before, copy.after) for copy in copies]
    assert all(ret == 0 for _, ret in ends)
    return [ms for ms, _ in ends]


def test_two_streams_on_one_device_take_turns_on_a_model_that_uses_every_core(sim, models):
    acl = sim.acl
    acl.init()
    sim.configure(device_ms=100.0)
    first, second = Copy(acl, models / "all.om"), Copy(acl, models / "all.om")
    device = sim.device_model(0)
    before = device.usage()
    times = run_together([first, second])
    assert times[0] == pytest.approx(100.0, abs=SLACK)
    assert times[1] == pytest.approx(200.0, abs=SLACK)  # queued for the cores behind the first
    used = device.usage()
    assert used.executions - before.executions == 2
    assert used.busy_seconds - before.busy_seconds == pytest.approx(0.2, abs=0.01)


def test_two_devices_run_at_once(sim, models):
    acl = sim.acl
    acl.init()
    sim.configure(device_ms=100.0)
    times = run_together([Copy(acl, models / "all.om", 0), Copy(acl, models / "all.om", 1)])
    assert times == [pytest.approx(100.0, abs=SLACK)] * 2


def test_streams_of_a_model_compiled_for_half_the_cores_run_side_by_side(sim, models):
    acl = sim.acl
    acl.init()
    sim.configure(device_ms=100.0, soc_name="Ascend310P3")  # 8 AI Cores; the model asks for 4
    times = run_together([Copy(acl, models / "half.om"), Copy(acl, models / "half.om"), Copy(acl, models / "half.om")])
    # on 4 of 8 cores its compute takes twice as long; two run at once, the third waits for one
    assert times == [pytest.approx(200.0, abs=SLACK), pytest.approx(200.0, abs=SLACK), pytest.approx(400.0, abs=SLACK)]


def test_without_a_shared_device_every_stream_has_the_device_to_itself(sim, models):
    acl = sim.acl
    acl.init()
    sim.configure(device_ms=100.0, shared_device=False)
    times = run_together([Copy(acl, models / "all.om"), Copy(acl, models / "all.om")])
    assert times == [pytest.approx(100.0, abs=SLACK)] * 2


def test_copies_queue_per_direction_and_overlap_the_other_direction_and_the_cores(sim, models):
    acl = sim.acl
    acl.init()
    size = 1 << 20
    sim.configure(copy_gbps=size / 0.1 / 1e9, device_ms=100.0)  # a MiB takes 100 ms each way
    context, _ = acl.rt.create_context(0)
    streams = [acl.rt.create_stream()[0] for _ in range(3)]
    host, _ = acl.rt.malloc_host(size)
    dev = [acl.rt.malloc(size, HUGE_FIRST)[0] for _ in range(3)]
    events = [(acl.rt.create_event()[0], acl.rt.create_event()[0]) for _ in range(3)]
    kinds = (H2D, H2D, D2H)
    for stream, ptr, kind, (before, after) in zip(streams, dev, kinds, events):
        dst, src = (ptr, host) if kind == H2D else (host, ptr)
        acl.rt.record_event(before, stream)
        assert acl.rt.memcpy_async(dst, size, src, size, kind, stream) == 0
        acl.rt.record_event(after, stream)
    device = sim.device_model(0)
    before_use = device.usage()
    for stream in streams:
        assert acl.rt.synchronize_stream(stream) == 0
    times = [acl.rt.event_elapsed_time(before, after)[0] for before, after in events]
    # the second H2D waits for the first; the D2H runs beside them
    assert times == [pytest.approx(100.0, abs=SLACK), pytest.approx(200.0, abs=SLACK), pytest.approx(100.0, abs=SLACK)]
    used = device.usage()
    assert (used.h2d_seconds - before_use.h2d_seconds, used.d2h_seconds - before_use.d2h_seconds) == (
        pytest.approx(0.2),
        pytest.approx(0.1),
    )
    assert used.busy_seconds == before_use.busy_seconds  # copy engines are not the cores
    for event_pair in events:
        for event in event_pair:
            acl.rt.destroy_event(event)
    for stream in streams:
        acl.rt.destroy_stream(stream)
    for ptr in dev:
        acl.rt.free(ptr)
    acl.rt.free_host(host)
    acl.rt.destroy_context(context)


def test_a_copy_in_device_run_mode_takes_no_modelled_time(sim):
    acl = sim.acl
    sim.configure(run_mode="device", copy_gbps=1e-6)
    acl.init()
    acl.rt.set_device(0)
    stream, _ = acl.rt.create_stream()
    host, _ = acl.rt.malloc_host(4096)
    dev, _ = acl.rt.malloc(4096, HUGE_FIRST)
    before, after = acl.rt.create_event()[0], acl.rt.create_event()[0]
    acl.rt.record_event(before, stream)
    aligned = host + (-host % 64)  # device-mode host memory is not 64-byte aligned
    assert acl.rt.memcpy_async(dev, 4096, aligned, 2048, H2D, stream) == 0
    acl.rt.record_event(after, stream)
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.rt.event_elapsed_time(before, after)[0] < 5.0


# --- processes --------------------------------------------------------------------------------

BOOKER = textwrap.dedent(
    """
    import json, sys
    from ge_python_backend.sim.device import Demand, SharedDevice, clock, wait_until
    device = SharedDevice(0)
    print("ready", flush=True)
    sys.stdin.readline()
    spans = []
    for _ in range(3):
        ready = clock()
        spans.append((ready, *device.execute(ready, Demand(0.2, 8, 8))))
    wait_until(spans[-1][2])  # as a stream waits for its work before the process ends
    print(json.dumps(spans), flush=True)
    """
)


def scoped_env(tmp_path: Path, scope: str) -> dict[str, str]:
    return dict(os.environ, **{SCOPE_ENV: scope, DIR_ENV: str(tmp_path), "PYTHONPATH": str(ROOT)})


def book_at_once(tmp_path: Path, scopes: list[str]) -> list[list[tuple[float, float, float]]]:
    """One booking process per scope, started together: each one's (ready, begin, end) bookings."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", BOOKER],
            env=scoped_env(tmp_path, scope),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for scope in scopes
    ]
    for run in runs:
        assert run.stdout.readline().strip() == "ready"
    for run in runs:
        run.stdin.write("go\n")
        run.stdin.flush()
    return [[tuple(span) for span in json.loads(run.communicate(timeout=60)[0])] for run in runs]


def test_processes_of_one_scope_book_the_same_device_and_the_last_one_out_removes_it(tmp_path):
    first, second = book_at_once(tmp_path, ["two-servers", "two-servers"])
    bookings = first + second
    # one device: six executions that each want all 8 cores for 0.2 s never run two at once, so
    # they take at least 1.2 s from the first core to the last (two devices: 0.6 s). Spans alone
    # cannot say it: an execution booked after another but ready microseconds before it starts in
    # the gap and finishes after it, its span enclosing the other's.
    assert max(end for *_, end in bookings) - min(begin for _, begin, _ in bookings) >= 6 * 0.2 - 1e-6
    assert all(end - begin >= 0.2 - 1e-9 for _, begin, end in bookings)  # none ran faster than all cores allow
    waited = [begin - ready for ready, begin, _ in first + second]
    assert max(waited) > 0.3  # some bookings of one process queued behind the other's
    assert list(tmp_path.iterdir()) == []


def test_processes_of_two_scopes_have_two_devices(tmp_path):
    first, second = book_at_once(tmp_path, ["server-a", "server-b"])
    assert all(begin == ready for ready, begin, _ in first[:1] + second[:1])  # neither waited for the other
    assert min(end for *_, end in first) > max(begin for _, begin, _ in second[:1])  # and they ran at once


def test_a_killed_last_user_leaves_nothing_the_next_user_sees(tmp_path):
    env = scoped_env(tmp_path, "killed")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from ge_python_backend.sim.device import Demand, SharedDevice, clock; import time; "
            "d = SharedDevice(0); d.execute(clock(), Demand(1000.0, 8, 8)); print('booked', flush=True); "
            "time.sleep(60)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "booked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert any(tmp_path.iterdir())  # the killed process could not clean up
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ge_python_backend.sim.device import Demand, SharedDevice, clock; "
            "d = SharedDevice(0); now = clock(); print(d.execute(now, Demand(0.01, 8, 8))[0] - now)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(done.stdout) == pytest.approx(0.0, abs=1e-6)  # the dead process's 1000 s booking is gone
    assert list(tmp_path.iterdir()) == []


def test_a_device_without_shared_memory_fails_set_device_saying_how_to_do_without(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(DIR_ENV, str(blocker / "shm"))
    simulator = Simulator()
    acl = simulator.acl
    acl.init()
    assert acl.rt.set_device(0) == 507000
    message = acl.get_recent_err_msg()
    assert str(blocker / "shm") in message and "acl_sim_shared_device false" in message
    simulator.configure(shared_device=False)
    assert acl.rt.set_device(0) == 0
    simulator.reset()


def test_threads_of_one_process_share_a_region_under_its_lock(tmp_path, monkeypatch):
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    region = SharedRegion("counter", 8, scope="threads")

    def add() -> None:
        for _ in range(200):
            with region.locked() as view:
                view[:8] = (int.from_bytes(view[:8], "little") + 1).to_bytes(8, "little")

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with region.locked() as view:
        assert int.from_bytes(view[:8], "little") == 800
    region.close()
    assert list(tmp_path.iterdir()) == []


def test_a_stream_device_books_nothing_shared():
    device = StreamDevice()
    now = time.monotonic()
    assert device.execute(now, Demand(0.01, 8, 8)) == (now, now + 0.01)
    assert device.execute(now, Demand(0.01, 8, 8)) == (now, now + 0.01)
    assert device.usage().executions == 2


def test_a_shared_device_counts_busy_time_once_when_executions_queue(tmp_path, monkeypatch):
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    device = SharedDevice(3, scope="busy")
    now = clock()
    device.execute(now, Demand(0.02, 8, 8))
    device.execute(now, Demand(0.02, 8, 8))
    time.sleep(0.05)
    used = device.usage()
    assert (used.busy_seconds, used.core_seconds, used.executions) == (
        pytest.approx(0.04, abs=1e-6),
        pytest.approx(0.32, abs=1e-5),
        2,
    )
    device.close()
