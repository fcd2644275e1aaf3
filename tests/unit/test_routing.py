"""The router's policy (serving/routing.py) on in-process members: where requests go, how they wait,
what an unavailable member costs them, and that every request is answered exactly once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from ge_python_backend.errors import ConfigError
from ge_python_backend.serving.routing import Job, MemberLimit, RefusalCause, RouteObserver, Router, SkipCause

WAIT = 5.0


class Recorder(RouteObserver):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered_by: Counter[str] = Counter()
        self.skips: Counter[tuple[str, SkipCause]] = Counter()
        self.peak: Counter[str] = Counter()
        self.refusals: list[RefusalCause] = []
        self.waiting_now = 0

    def answered(self, member: str) -> None:
        with self.lock:
            self.answered_by[member] += 1

    def in_flight(self, member: str, rows: int) -> None:
        with self.lock:
            self.peak[member] = max(self.peak[member], rows)

    def skipped(self, member: str, cause: SkipCause) -> None:
        with self.lock:
            self.skips[(member, cause)] += 1

    def refused(self, cause: RefusalCause) -> None:
        with self.lock:
            self.refusals.append(cause)

    def waiting(self, requests: int) -> None:
        self.waiting_now = requests


class Members:
    """In-process members: each attempt records itself and waits for its gate (or answers at once);
    a member in ``down`` answers "unavailable"."""

    def __init__(self, gated: bool = True) -> None:
        self.lock = threading.Lock()
        self.gated = gated
        self.gates: dict[int, threading.Event] = {}
        self.served: dict[int, str] = {}
        self.attempts: list[tuple[int, str]] = []
        self.refused: dict[int, str] = {}
        self.answers: Counter[int] = Counter()
        self.down: set[str] = set()
        self.ready_calls: list[str] = []
        self.ready_answer = True
        self.started = threading.Condition(self.lock)

    def job(self, index: int, rows: int = 1, deadline: float | None = None) -> Job:
        def attempt(member: str, timeout_us: int) -> str | None:
            with self.lock:
                self.attempts.append((index, member))
                self.started.notify_all()
                if member in self.down:
                    return f"{member} is down"
                gate = self.gates.setdefault(index, threading.Event())
            if self.gated:
                assert gate.wait(WAIT), f"request {index} was never released"
            with self.lock:
                self.served[index] = member
                self.answers[index] += 1
            return None

        def refuse(message: str) -> None:
            with self.lock:
                self.refused[index] = message
                self.answers[index] += 1

        return Job(rows, attempt, refuse, deadline)

    def release(self, *indexes: int) -> None:
        with self.lock:
            for index in indexes:
                self.gates.setdefault(index, threading.Event()).set()

    def wait_attempts(self, count: int) -> None:
        with self.lock:
            assert self.started.wait_for(lambda: len(self.attempts) >= count, WAIT), self.attempts

    def ready(self, member: str) -> bool:
        with self.lock:
            self.ready_calls.append(member)
            return self.ready_answer


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.fixture
def members():
    return Members()


def make_router(members: Members, limits=(("npu", 2), ("cpu", 1)), **kw) -> tuple[Router, Recorder]:
    recorder = Recorder()
    router = Router([MemberLimit(n, lim) for n, lim in limits], ready=members.ready, observer=recorder, **kw)
    return router, recorder


def test_requests_fill_the_first_member_to_its_limit_then_spill_in_order(members):
    router, recorder = make_router(members)
    router.submit([members.job(i) for i in range(3)])
    members.wait_attempts(3)
    assert dict(members.attempts) == {0: "npu", 1: "npu", 2: "cpu"}
    assert recorder.skips[("npu", SkipCause.AT_LIMIT)] == 1
    members.release(0, 1, 2)
    wait_until(lambda: sum(members.answers.values()) == 3, "answers")
    assert recorder.answered_by == {"npu": 2, "cpu": 1}
    router.close()


def test_waiting_requests_go_first_in_first_out_to_the_first_member_that_frees(members):
    router, recorder = make_router(members)
    router.submit([members.job(i) for i in range(5)])  # 0,1 -> npu; 2 -> cpu; 3, 4 wait
    members.wait_attempts(3)
    assert recorder.waiting_now == 2
    members.release(2)  # the cpu frees first
    members.wait_attempts(4)
    assert members.attempts[3] == (3, "cpu")
    members.release(0)
    members.wait_attempts(5)
    assert members.attempts[4] == (4, "npu")
    members.release(1, 3, 4)
    wait_until(lambda: sum(members.answers.values()) == 5, "answers")
    assert set(members.answers.values()) == {1} and not members.refused
    assert recorder.peak == {"npu": 2, "cpu": 1} and recorder.waiting_now == 0
    router.close()


def test_an_unavailable_member_backs_off_and_the_request_goes_to_the_next(members):
    clock = [100.0]
    router, recorder = make_router(members, backoff_s=5.0, clock=lambda: clock[0])
    members.down.add("npu")
    router.submit([members.job(0)])
    members.wait_attempts(2)
    assert members.attempts == [(0, "npu"), (0, "cpu")]
    members.down.clear()
    router.submit([members.job(1)])  # npu backs off: straight to the cpu's line (cpu is busy with 0)
    wait_until(lambda: recorder.waiting_now == 1, "request 1 waits for the cpu")
    assert recorder.skips[("npu", SkipCause.UNAVAILABLE)] == 1
    assert recorder.skips[("npu", SkipCause.BACKING_OFF)] == 1
    members.release(0)
    members.wait_attempts(3)
    assert members.attempts[2] == (1, "cpu")
    assert members.ready_calls == []  # no probe before the back-off is over
    clock[0] += 5.0
    with router._wake:  # the watch thread reads the clock when woken
        router._wake.notify()
    wait_until(lambda: members.ready_calls == ["npu"], "the readiness probe after the back-off")
    router.submit([members.job(2)])
    members.wait_attempts(4)
    assert members.attempts[3] == (2, "npu")
    members.release(1, 2)
    wait_until(lambda: sum(members.answers.values()) == 3, "answers")
    assert members.served == {0: "cpu", 1: "cpu", 2: "npu"}
    router.close()


def test_a_request_no_member_can_take_is_refused_at_once_naming_each_member(members):
    router, recorder = make_router(members)
    members.down.update({"npu", "cpu"})
    router.submit([members.job(0)])
    wait_until(lambda: 0 in members.refused, "refusal")
    message = members.refused[0]
    assert "npu: npu is down" in message and "cpu: cpu is down" in message
    router.submit([members.job(1)])  # both back off now: refused without an attempt
    wait_until(lambda: 1 in members.refused, "refusal")
    assert [i for i, _ in members.attempts] == [0, 0]
    assert "backing off" in members.refused[1] and "npu is down" in members.refused[1]
    assert recorder.refusals == [RefusalCause.NO_MEMBER, RefusalCause.NO_MEMBER]
    router.close()


def test_a_waiting_request_is_refused_when_its_deadline_passes(members):
    router, recorder = make_router(members, limits=(("npu", 1),))
    router.submit([members.job(0), members.job(1, deadline=time.monotonic() + 0.05)])
    wait_until(lambda: 1 in members.refused, "the deadline's refusal")
    assert "timeout" in members.refused[1] and "npu: 1 of 1 rows in flight" in members.refused[1]
    assert recorder.refusals == [RefusalCause.TIMEOUT]
    members.release(0)
    wait_until(lambda: members.answers[0] == 1, "answer")
    assert members.answers[1] == 1 and [i for i, _ in members.attempts] == [0]
    router.close()


def test_the_member_timeout_is_what_is_left_of_the_deadline(members):
    seen: list[int] = []
    router, _ = make_router(members)
    done = threading.Event()

    def attempt(member: str, timeout_us: int) -> None:
        seen.append(timeout_us)
        done.set()

    router.submit([Job(1, attempt, lambda m: None, deadline=time.monotonic() + 2.0)])
    router.submit([Job(1, attempt, lambda m: None)])
    assert done.wait(WAIT)
    wait_until(lambda: len(seen) == 2, "attempts")
    assert 1_000_000 < max(seen) <= 2_000_000 and min(seen) == 0
    router.close()


def test_rows_count_against_the_limit(members):
    router, recorder = make_router(members, limits=(("npu", 8), ("cpu", 8)))
    router.submit([members.job(0, rows=6), members.job(1, rows=4), members.job(2, rows=1)])
    members.wait_attempts(3)
    assert dict(members.attempts) == {0: "npu", 1: "npu", 2: "cpu"}  # 6 < 8 admits 4 more; then 10 >= 8
    members.release(0, 1, 2)
    wait_until(lambda: sum(members.answers.values()) == 3, "answers")
    assert recorder.peak["npu"] == 10
    router.close()


def test_a_probe_that_finds_the_member_not_ready_keeps_it_backing_off_and_refuses_who_waits_for_nothing(members):
    clock = [0.0]
    router, recorder = make_router(members, limits=(("npu", 1), ("cpu", 1)), backoff_s=1.0, clock=lambda: clock[0])
    members.down.add("npu")
    router.submit([members.job(0)])  # npu down -> cpu
    members.wait_attempts(2)
    members.ready_answer = False
    members.down.add("cpu")
    router.submit([members.job(1)])  # npu backing off, cpu busy: waits
    wait_until(lambda: recorder.waiting_now == 1, "waiting")
    clock[0] += 1.0
    with router._wake:
        router._wake.notify()
    wait_until(lambda: members.ready_calls, "probe")
    members.release(0)  # cpu frees: request 1 goes there, and the cpu is down now
    wait_until(lambda: 1 in members.refused, "refusal")
    assert "npu" in members.refused[1] and "cpu: cpu is down" in members.refused[1]
    router.close()


def test_closing_refuses_what_waits_and_lets_what_runs_finish(members):
    router, recorder = make_router(members, limits=(("npu", 1),))
    router.submit([members.job(0), members.job(1)])
    members.wait_attempts(1)
    closer = threading.Thread(target=router.close)
    closer.start()
    wait_until(lambda: 1 in members.refused, "refusal of the waiting request")
    assert "unloading" in members.refused[1]
    closer.join(WAIT)
    assert not closer.is_alive()  # close does not wait for the request at the member
    members.release(0)
    wait_until(lambda: members.answers[0] == 1, "the request at the member finishes after close")
    assert members.answers == {0: 1, 1: 1}
    router.submit([members.job(2)])
    assert "unloading" in members.refused[2]


def test_random_loads_answer_every_request_exactly_once_within_the_limits():
    rng = random.Random(7)
    for round_ in range(6):
        members = Members(gated=False)
        limits = [("a", rng.randint(1, 4)), ("b", rng.randint(1, 4)), ("c", rng.randint(1, 3))]
        router, recorder = make_router(members, limits=limits, backoff_s=0.01)
        flaky = {name for name, _ in limits if rng.random() < 0.4}
        original = members.job

        def job(index: int, flaky=flaky, original=original, members=members) -> Job:
            made = original(index, rows=rng.randint(1, 3))
            inner = made.attempt

            def attempt(member: str, timeout_us: int) -> str | None:
                time.sleep(rng.random() * 0.002)
                if member in flaky and rng.random() < 0.3:
                    with members.lock:
                        members.attempts.append((index, member))
                    return f"{member} flaked"
                return inner(member, timeout_us)

            made.attempt = attempt
            return made

        count = 300
        for start in range(0, count, 20):
            router.submit([job(i) for i in range(start, start + 20)])
        wait_until(lambda count=count, members=members: len(members.answers) == count, f"round {round_}: answers")
        router.close()
        assert set(members.answers.values()) == {1}, f"round {round_}: a request answered twice"
        for name, limit in limits:
            assert recorder.peak[name] <= limit - 1 + 3, f"round {round_}: {name} over its limit"
        for index, message in members.refused.items():
            tried = [m for i, m in members.attempts if i == index]
            assert tried or "backing off" in message
        assert sum(recorder.answered_by.values()) == count - len(members.refused)


def test_a_router_without_members_is_refused():
    with pytest.raises(ConfigError, match="at least one member"):
        Router([], ready=lambda m: True)
