"""serve's supervisor against a scripted server: what counts as a dead, hung or failed instance
(and what is an unload or a reload), how it recovers, backs off and gives up, what it counts and
what its health checks say. The same supervisor against a real tritonserver:
tests/e2e/test_self_healing.py."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import pytest

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.bench.metrics import Scrape
from ge_python_backend.ops.processes import Stub
from ge_python_backend.ops.supervisor import (
    ENGINE_HEALTHY,
    Cause,
    InstanceSeries,
    Observation,
    RecoveryPolicy,
    Supervisor,
    died,
    find_problems,
    instance_series,
    restarts_stubs_in_execute,
)
from ge_python_backend.triton.metrics import HEARTBEAT

POLICY = RecoveryPolicy(hang_s=10.0, attempts=3, settle_s=60.0, backoff_s=0.001, max_backoff_s=0.004)


def stub(pid: int, model: str = "m", instance: str = "m_0_0", started: int | None = None) -> Stub:
    return Stub(pid, model, "1", instance, pid if started is None else started)


def series(stub_: Stub, heartbeat: float, healthy: bool = True) -> InstanceSeries:
    return InstanceSeries(stub_.model, stub_.version, stub_.instance, stub_.pid, heartbeat, healthy)


def look(stubs, ready=(("m", "1"),), series_=(), now: float = 1000.0, metrics: bool = True) -> Observation:
    return Observation(
        time=now,
        stubs=tuple(stubs),
        ready_versions=frozenset(ready),
        series={s.pid: s for s in series_} if metrics else None,
    )


# -- what died ----------------------------------------------------------------------------------


def test_a_vanished_stub_of_a_ready_model_with_its_series_standing_died():
    a, b = stub(10), stub(11, instance="m_0_1")
    now = look([b], series_=[series(a, 999.0), series(b, 999.0)])
    assert died(a, now)
    (problem,) = find_problems([a, b], now, POLICY)
    assert (problem.model, problem.cause, problem.hung) == ("m", Cause.STUB_DIED, ())
    assert problem.detail == "stub of instance m_0_0 (pid 10) died"


def test_a_plain_python_model_without_series_counts_on_the_index_and_successors_alone():
    a = stub(10)
    assert died(a, look([], series_=[]))
    assert died(a, look([], metrics=False))


def test_an_unload_a_reload_and_a_normal_finalize_are_not_deaths():
    a = stub(10)
    assert not died(a, look([], ready=()))  # unloaded or unloading: its readiness says so first
    assert not died(a, look([stub(20, started=30)]))  # a reload started its successor first
    # a GEModel stub that finalized deleted its series; its sibling's stand
    sibling = stub(11, instance="m_0_1")
    assert not died(a, look([sibling], series_=[series(sibling, 999.0)]))


def test_where_the_backend_restarts_dead_stubs_a_successor_proves_no_reload_while_the_series_stand():
    """Triton 24.02 kills a stub it finds unhealthy (a SIGSTOPped one) and starts another for the
    same instance inside execute: that stub died, its series still there; a reloaded one finalized."""
    a, successor = stub(10, started=5), stub(20, started=30)
    restarted = look([successor], series_=[series(a, 999.0), series(successor, 0.0)])
    assert died(a, restarted, backend_restarts=True) and not died(a, restarted)
    reloaded = look([successor], series_=[series(successor, 0.0)])
    assert not died(a, reloaded, backend_restarts=True)
    assert not died(a, look([successor], metrics=False), backend_restarts=True)


def test_an_older_stub_of_the_same_instance_is_no_successor():
    a = stub(20, started=30)
    assert died(a, look([stub(10, started=5)], series_=[series(a, 999.0)]))


def test_a_stub_whose_heartbeat_stopped_hangs_and_is_to_be_killed():
    a, b = stub(10), stub(11, instance="m_0_1")
    now = look([a, b], series_=[series(a, 1000.0 - 10.5), series(b, 999.5)])
    (problem,) = find_problems([a, b], now, POLICY)
    assert (problem.cause, problem.hung) == (Cause.STUB_HUNG, (10,))
    assert "no heartbeat for 10 s" in problem.detail


def test_an_engine_out_of_service_is_a_failed_engine_and_a_dead_stub_comes_first():
    a, b, c = stub(10), stub(11, instance="m_0_1"), stub(12, instance="m_0_2")
    now = look([b, c], series_=[series(a, 990.0), series(b, 999.9, healthy=False), series(c, 999.9)])
    (problem,) = find_problems([a, b, c], now, POLICY)
    assert problem.cause is Cause.STUB_DIED
    assert problem.detail == (
        "stub of instance m_0_0 (pid 10) died; instance m_0_1's engine failed fatally (ge_engine_healthy 0)"
    )


def test_stubs_a_reload_is_replacing_report_nothing():
    a = stub(10)
    now = look([a], series_=[series(a, 900.0, healthy=False)])
    assert find_problems([a], now, POLICY, retiring={10}) == []
    assert find_problems([a], look([], series_=[series(a, 999.0)]), POLICY, retiring={10}) == []


def test_a_stub_whose_series_were_never_set_is_loading_not_hung_or_failed():
    """tritonserver shows a stub's series at 0 from their creation until GEModel's first flush
    (seen when an operator reloads a READY model: its new stub was killed as hung)."""
    a, fresh = stub(10), stub(11, instance="m_0_0", started=20)
    now = look([a, fresh], series_=[series(a, 999.5), series(fresh, 0.0, healthy=False)])
    assert find_problems([a], now, POLICY) == []


def test_instances_of_a_model_not_ready_are_not_judged():
    a = stub(10)
    now = look([a], ready=(), series_=[series(a, 1.0, healthy=False)])
    assert find_problems([a], now, POLICY) == []


def test_gemodel_series_are_read_per_stub_pid():
    labels = (("instance", "m_0_0"), ("model", "m"), ("pid", "10"), ("version", "1"))
    scrape = Scrape({(HEARTBEAT, labels): 123.0, (ENGINE_HEALTHY, labels): 0.0, ("nv_x", ()): 1.0})
    assert instance_series(scrape) == {10: InstanceSeries("m", "1", "m_0_0", 10, 123.0, False)}


def test_the_policy_backs_off_doubling_and_refuses_nonsense():
    policy = RecoveryPolicy(backoff_s=2.0, max_backoff_s=5.0)
    assert [policy.backoff(n) for n in range(5)] == [0.0, 2.0, 4.0, 5.0, 5.0]
    with pytest.raises(ConfigError, match="recovery attempts 0: expected 1 or more"):
        RecoveryPolicy(attempts=0)
    with pytest.raises(ConfigError, match="recovery hang_s -1"):
        RecoveryPolicy(hang_s=-1)


# -- recovering -----------------------------------------------------------------------------------


@dataclass
class ScriptedServer:
    """A tritonserver as the supervisor sees it: stubs, index, GEModel series, reload and unload."""

    stubs_now: list[Stub] = field(default_factory=lambda: [stub(10), stub(11, instance="m_0_1")])
    ready: set[tuple[str, str]] = field(default_factory=lambda: {("m", "1")})
    #: GEModel's series per stub pid: (stub, heartbeat, engine healthy); a killed stub's stay
    exported: dict[int, tuple[Stub, float, bool]] = field(default_factory=dict)
    #: what each reload answers, in turn (then 200)
    answers: list[tuple[int, str]] = field(default_factory=list)
    reloads: list[tuple[str, str]] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    next_pid: int = 100

    def __post_init__(self) -> None:
        #: the instances of each model's config: a load starts one stub for each
        self.instances = {(s.model, s.instance) for s in self.stubs_now}
        for each in self.stubs_now:
            self.exported[each.pid] = (each, time.time(), True)

    def beat(self, pid: int, age: float = 0.0, healthy: bool = True) -> None:
        self.exported[pid] = (self.exported[pid][0], time.time() - age, healthy)

    def stubs(self) -> list[Stub]:
        return list(self.stubs_now)

    def version_ready(self, model: str, version: str) -> bool:
        return (model, version) in self.ready

    def scrape(self) -> Scrape:
        samples = {}
        for pid, (each, beat, healthy) in self.exported.items():
            labels = tuple(
                sorted({"model": each.model, "version": "1", "instance": each.instance, "pid": str(pid)}.items())
            )
            samples[(HEARTBEAT, labels)] = beat
            samples[(ENGINE_HEALTHY, labels)] = 1.0 if healthy else 0.0
        return Scrape(samples)

    def reload(self, model: str, note: str, timeout: float) -> tuple[int, str]:
        self.reloads.append((model, note))
        status, body = self.answers.pop(0) if self.answers else (200, "")
        if status == 200:  # the new instances start, then the old ones finalize (their series go)
            old = [s for s in self.stubs_now if s.model == model]
            for instance in sorted(i for m, i in self.instances if m == model):
                self.next_pid += 1
                fresh = Stub(self.next_pid, model, "1", instance, self.next_pid)
                self.stubs_now.append(fresh)
                self.exported[fresh.pid] = (fresh, time.time(), True)
            for each in old:
                self.stubs_now.remove(each)
                self.exported.pop(each.pid)
            self.ready.add((model, "1"))
        return status, body

    def repository_call(self, action: str, model: str, timeout: float) -> tuple[int, str]:
        assert action == "unload"
        self.unloads.append(model)
        self.ready.discard((model, "1"))
        for each in [s for s in self.stubs_now if s.model == model]:
            self.stubs_now.remove(each)
            self.exported.pop(each.pid)
        return 200, ""

    def running(self) -> bool:
        return True

    def stub_running(self, pid: int) -> bool:
        return any(s.pid == pid for s in self.stubs_now)

    def kill(self, pid: int) -> None:
        """SIGKILL: the process goes, its series stay as they were."""
        self.stubs_now = [s for s in self.stubs_now if s.pid != pid]


def supervised(server: ScriptedServer, **options) -> Supervisor:
    """A supervisor that has had its first look, running recoveries inline."""
    policy = options.pop("policy", POLICY)
    supervisor = Supervisor(server, policy, kill=server.kill, spawn=lambda work: work(), **options)
    assert supervisor.look() == []
    return supervisor


def test_a_dead_stub_is_reloaded_counted_and_logged(caplog):
    server = ScriptedServer()
    supervisor = supervised(server)
    server.kill(10)
    with caplog.at_level(logging.INFO, logger="ge_python_backend.ops.supervisor"):
        (problem,) = supervisor.look()
    assert problem.cause is Cause.STUB_DIED
    ((model, note),) = server.reloads
    assert model == "m" and note.startswith("1: stub_died at ")
    assert supervisor.registry.get_sample_value("ge_model_recoveries_total", {"model": "m", "cause": "stub_died"}) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == (
        "supervisor: model m: stub of instance m_0_0 (pid 10) died; reloading it (recovery 1 of 3 in a row)"
    )
    assert (
        messages[1].startswith("supervisor: model m serves again, ") and "after its dead stub was found" in messages[1]
    )
    supervisor.look()  # the old stubs ended with the reload: nothing more to do
    assert len(server.reloads) == 1
    assert supervisor.registry.get_sample_value("ge_model_healthy", {"model": "m"}) == 1
    assert supervisor.verdict("ready", 200) == [] and supervisor.verdict("live", 200) == []


def test_a_hung_stub_is_killed_before_its_model_is_reloaded():
    server = ScriptedServer()
    supervisor = supervised(server)
    server.beat(11, age=60)
    (problem,) = supervisor.look()
    assert (problem.cause, problem.hung) == (Cause.STUB_HUNG, (11,))
    assert 11 not in {s.pid for s in server.stubs_now} and len(server.reloads) == 1
    assert supervisor.registry.get_sample_value("ge_model_recoveries_total", {"model": "m", "cause": "stub_hung"}) == 1


def test_a_failed_engine_is_reloaded_once_though_its_old_instances_report_it_until_they_end():
    server = ScriptedServer()
    supervisor = supervised(server)
    server.beat(10, healthy=False)
    server.beat(11, healthy=False)
    (problem,) = supervisor.look()
    assert problem.cause is Cause.ENGINE_FAILED and len(server.reloads) == 1
    assert supervisor.look() == [] and len(server.reloads) == 1


def test_a_model_that_breaks_again_at_once_is_reloaded_after_a_backoff_then_left_unloaded(caplog):
    server = ScriptedServer(stubs_now=[stub(10)])
    supervisor = supervised(server)
    with caplog.at_level(logging.WARNING, logger="ge_python_backend.ops.supervisor"):
        for _ in range(4):
            (victim,) = [s for s in server.stubs_now if s.model == "m"]
            server.kill(victim.pid)
            supervisor.look()
    assert len(server.reloads) == 3 and server.unloads == ["m"]
    starts = [r.getMessage() for r in caplog.records if "reloading it" in r.getMessage()]
    assert [s.split("reloading it")[1] for s in starts] == [
        " (recovery 1 of 3 in a row)",
        " in 0.001 s (recovery 2 of 3 in a row)",
        " in 0.002 s (recovery 3 of 3 in a row)",
    ]
    (given_up,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert given_up.getMessage().startswith(
        "supervisor: model m broken again after 3 recoveries in a row, each within 60 s of the last (last: stub of "
        "instance m_0_0 (pid 103) died); left unloaded. Fix its cause, then load it: POST /v2/repository/models/m/load"
    )
    supervisor.look()
    assert supervisor.registry.get_sample_value("ge_model_unrecoverable", {"model": "m"}) == 1
    assert supervisor.registry.get_sample_value("ge_model_healthy", {"model": "m"}) == 0
    (live,) = supervisor.verdict("live", 200)
    assert live.startswith("model m: broken again after 3 recoveries in a row")
    # an operator fixes it and loads it: watched again
    server.reload("m", "by hand", 1.0)
    supervisor.look()
    assert supervisor.verdict("live", 200) == [] and supervisor.verdict("ready", 200) == []
    assert supervisor.registry.get_sample_value("ge_model_unrecoverable", {"model": "m"}) == 0


def test_a_failure_after_the_settle_time_starts_afresh():
    clock = [0.0]
    server = ScriptedServer(stubs_now=[stub(10)])
    supervisor = supervised(server, clock=lambda: clock[0])
    for _ in range(5):
        (victim,) = server.stubs_now
        server.kill(victim.pid)
        supervisor.look()
        clock[0] += POLICY.settle_s + 1
    assert len(server.reloads) == 5 and server.unloads == []


def test_a_reload_that_fails_is_retried_then_the_model_is_left_unloaded():
    failure = (400, '{"error":"load failed for model \'m\': the device is gone\\n\\nAt:\\n  File x"}')
    server = ScriptedServer(answers=[failure] * 3)
    supervisor = supervised(server)
    server.kill(10)
    supervisor.look()
    assert len(server.reloads) == 3 and server.unloads == ["m"]
    (reason,) = supervisor.verdict("live", 200)
    assert (
        "(last: the reload failed (HTTP 400): load failed for model 'm': the device is gone); left unloaded" in reason
    )


def test_with_recovery_off_a_broken_model_is_unrecoverable_at_once_and_nothing_is_reloaded():
    server = ScriptedServer()
    supervisor = supervised(server, recovery_off="--recovery off")
    server.kill(10)
    supervisor.look()
    assert server.reloads == []
    assert supervisor.verdict("live", 200) == [
        "model m: stub of instance m_0_0 (pid 10) died; recovery is off: --recovery off"
    ]


def test_readiness_names_what_is_wrong_and_tritonserver_and_a_stale_supervisor_count():
    server = ScriptedServer()
    supervisor = supervised(server, recovery_off="--recovery off")
    assert supervisor.verdict("ready", 503) == ["tritonserver's /v2/health/ready answers 503"]
    assert supervisor.verdict("live", 0) == ["tritonserver's /v2/health/live answers nothing"]
    supervisor.last_look -= 31
    assert supervisor.verdict("ready", 200)[0].startswith("the supervisor has not looked at tritonserver for 3")


def test_a_model_an_operator_unloads_is_no_longer_reported():
    server = ScriptedServer()
    supervisor = supervised(server)
    assert supervisor.registry.get_sample_value("ge_model_healthy", {"model": "m"}) == 1
    server.repository_call("unload", "m", 1.0)
    assert supervisor.look() == []
    assert supervisor.registry.get_sample_value("ge_model_healthy", {"model": "m"}) is None
    assert supervisor.status()["models"] == {}


def test_a_look_that_listed_the_stubs_before_a_reload_ended_takes_its_new_stubs_for_running_not_dead():
    server = ScriptedServer(stubs_now=[stub(10)])
    supervisor = supervised(server)
    stale = supervisor.observe()  # lists stub 10 only
    server.kill(10)
    supervisor.look()  # reloaded: stub 101 runs, watched from the reload's end
    assert len(server.reloads) == 1 and [s.pid for s in server.stubs_now] == [101]
    assert supervisor.judge(stale) == []  # 101 is missing from the stale list, yet it runs
    assert len(server.reloads) == 1 and 101 in {s.pid for s in supervisor.last_stubs()}
    server.kill(101)
    (problem,) = supervisor.look()  # still watched: its death is seen
    assert problem.detail == "stub of instance m_0_0 (pid 101) died"


def test_the_hung_stub_a_recovery_killed_is_no_second_death():
    server = ScriptedServer(stubs_now=[stub(10)])
    supervisor = Supervisor(server, POLICY, kill=server.kill, spawn=lambda work: None)  # recoveries wait
    assert supervisor.look() == []
    server.beat(10, age=60)
    (problem,) = supervisor.look()
    assert problem.cause is Cause.STUB_HUNG
    server.kill(10)  # what the recovery does first
    assert supervisor.look() == [] and supervisor.look() == []


def test_while_tritonserver_is_restarted_nothing_is_looked_at_and_its_models_come_back_counted(caplog):
    server = ScriptedServer()
    supervisor = supervised(server)
    assert supervisor.server_died("tritonserver died of signal 9") == {"m"}
    server.stubs_now = []
    assert supervisor.look() == []  # the old server's stubs are gone: no model died of it
    assert supervisor.verdict("ready", 200) == ["tritonserver is being restarted: tritonserver died of signal 9"]
    server.stubs_now = [stub(20), stub(21, instance="m_0_1")]
    server.exported = {s.pid: (s, time.time(), True) for s in server.stubs_now}
    supervisor.server_restarted({"m"})
    assert supervisor.serving() == {"m"} and server.reloads == []
    assert (
        supervisor.registry.get_sample_value("ge_model_recoveries_total", {"model": "m", "cause": "server_died"}) == 1
    )
    assert supervisor.verdict("ready", 200) == []
    server.kill(20)  # the models' own failure soon after: a first recovery, not one more in a row
    with caplog.at_level(logging.WARNING, logger="ge_python_backend.ops.supervisor"):
        supervisor.look()
    assert "(recovery 1 of 3 in a row)" in caplog.records[0].getMessage()


def test_past_the_dead_stub_budget_tritonserver_is_restarted_instead_and_the_model_counted():
    server = ScriptedServer(stubs_now=[stub(10)])
    restarts: list[str] = []
    policy = RecoveryPolicy(attempts=3, settle_s=0.0001, backoff_s=0.001, dead_stub_budget=2)
    supervisor = supervised(server, policy=policy, restart_server=lambda why, grace: restarts.append(why))
    for _ in range(3):
        time.sleep(0.001)  # past the settle time: each death starts afresh
        (victim,) = server.stubs_now
        server.kill(victim.pid)
        supervisor.look()
    assert len(server.reloads) == 2 and len(restarts) == 1
    assert "tritonserver has lost 3 stub processes since it started" in restarts[0]
    server.reload("m", "as a restart would", 1.0)  # the new server's stubs
    supervisor.server_restarted({"m"})
    assert supervisor.registry.get_sample_value("ge_model_recoveries_total", {"model": "m", "cause": "stub_died"}) == 3
    assert supervisor.lost_stubs == 0 and supervisor.verdict("ready", 200) == []


def test_a_stub_that_dies_while_its_models_reload_runs_is_replaced_by_it_not_reloaded_again():
    server = ScriptedServer()  # instances m_0_0 (pid 10) and m_0_1 (pid 11)
    works: list = []
    supervisor = Supervisor(server, POLICY, kill=server.kill, spawn=works.append)
    assert supervisor.look() == []
    server.kill(10)
    (problem,) = supervisor.look()  # 11 is still listed: a kill of both straddled the look
    server.kill(11)
    reload = server.reload

    def look_while_loading(model: str, note: str, timeout: float) -> tuple[int, str]:
        supervisor.look()  # before the new instances start
        return reload(model, note, timeout)

    server.reload = look_while_loading
    works.pop()()
    assert works == [] and len(server.reloads) == 1
    assert supervisor.look() == [] and len(server.reloads) == 1


def test_the_python_backends_that_restart_a_lost_stub_inside_execute_are_those_before_r24_06():
    assert [restarts_stubs_in_execute(v) for v in ("2.43.0", "2.46.0", "2.47.0", "2.51.0", "3.0.0")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert not restarts_stubs_in_execute(None) and not restarts_stubs_in_execute("dev")


def test_on_a_server_that_crashes_of_its_own_stub_restart_a_lost_stub_restarts_it_at_once_model_first(caplog):
    """Triton 24.02: the Python backend restarts the dead stub at the next request and crashes;
    the supervisor restarts tritonserver instead of reloading, with nothing to wait for."""
    server = ScriptedServer(stubs_now=[stub(10)])
    restarts: list[tuple[str, float]] = []
    supervisor = supervised(server, restart_server=lambda why, grace: restarts.append((why, grace)))
    supervisor.stub_restart_crashes = True
    server.kill(10)
    with caplog.at_level(logging.WARNING, logger="ge_python_backend.ops.supervisor"):
        supervisor.look()
    assert server.reloads == []
    ((why, grace),) = restarts
    assert grace == 0.0
    assert why == (
        "model m: stub of instance m_0_0 (pid 10) died; this tritonserver's Python backend restarts a lost stub "
        "inside execute, which crashes it (python_backend before r24.06): restarting it with the model first"
    )
    assert supervisor.failing() == {"m"}  # what serve starts tritonserver with first


@dataclass
class RestartedServer(ScriptedServer):
    """A tritonserver started again with some models; ``load`` brings the others back."""

    loads: list[str] = field(default_factory=list)

    def repository_call(self, action: str, model: str, timeout: float) -> tuple[int, str]:
        if action == "unload":
            return super().repository_call(action, model, timeout)
        self.loads.append(model)
        self.ready.add((model, "1"))
        self.next_pid += 1
        fresh = Stub(self.next_pid, model, "1", f"{model}_0_0", self.next_pid)
        self.stubs_now.append(fresh)
        self.exported[fresh.pid] = (fresh, time.time(), True)
        return 200, ""


def test_models_loaded_after_a_restart_are_being_recovered_until_back_then_counted_and_watched():
    server = RestartedServer(
        stubs_now=[stub(10), stub(20, model="n", instance="n_0_0")], ready={("m", "1"), ("n", "1")}
    )
    supervisor = supervised(server)
    assert supervisor.server_died("tritonserver died of signal 11") == {"m", "n"}
    server.stubs_now, server.ready, server.exported = [stub(30)], {("m", "1")}, {}  # started with m alone
    server.exported[30] = (server.stubs_now[0], time.time(), True)
    supervisor.server_restarted({"m", "n"}, loading={"n"})
    count = supervisor.registry.get_sample_value
    assert count("ge_model_recoveries_total", {"model": "m", "cause": "server_died"}) == 1
    assert count("ge_model_recoveries_total", {"model": "n", "cause": "server_died"}) is None
    assert supervisor.verdict("ready", 200) == [
        "model n is being recovered: loading it again after tritonserver's restart"
    ]
    assert supervisor.verdict("live", 200) == []
    # died again before n was back: n is among what the next start must bring back
    assert supervisor.server_died("again") == {"m", "n"}
    supervisor.server_restarted({"m", "n"}, loading={"n"})
    status, body = server.repository_call("load", "n", 1.0)
    supervisor.restored("n", status, body)
    assert count("ge_model_recoveries_total", {"model": "n", "cause": "server_died"}) == 1
    assert supervisor.serving() == {"m", "n"} and supervisor.verdict("ready", 200) == []
    (fresh,) = [s for s in server.stubs_now if s.model == "n"]
    server.kill(fresh.pid)  # its new stub is watched at once
    (problem,) = supervisor.look()
    assert (problem.model, problem.cause) == ("n", Cause.STUB_DIED)


def test_a_model_that_does_not_load_again_after_a_restart_is_given_up_on_loudly(caplog):
    server = ScriptedServer(stubs_now=[stub(10)])
    supervisor = supervised(server)
    supervisor.server_died("tritonserver died of signal 11")
    server.stubs_now, server.ready = [], set()
    supervisor.server_restarted({"m"}, loading={"m"})
    with caplog.at_level(logging.ERROR, logger="ge_python_backend.ops.supervisor"):
        supervisor.restored("m", 400, '{"error":"failed to load \'m\': bad file"}')
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        "supervisor: model m not loaded again after tritonserver's restart (HTTP 400: failed to load 'm': bad file)"
    )
    live, ready = supervisor.verdict("live", 200), supervisor.verdict("ready", 200)
    assert (
        live
        == ready
        == ["model m: not loaded again after tritonserver's restart (HTTP 400: failed to load 'm': bad file)"]
    )


def test_a_reload_cut_short_by_the_servers_death_is_left_to_its_restart():
    """The reload of a model whose dead stub crashes tritonserver (24.02) fails with no answer:
    no retries against the server being restarted, no giving up, the restart's state kept."""
    server = ScriptedServer(stubs_now=[stub(10)])
    works: list = []
    supervisor = Supervisor(server, POLICY, kill=server.kill, spawn=works.append)
    supervisor.look()
    server.kill(10)
    supervisor.look()
    (work,) = works
    reloads = []

    def dies_meanwhile(model: str, note: str, timeout: float) -> tuple[int, str]:
        reloads.append(model)
        supervisor.server_died("tritonserver died of signal 11")
        supervisor.server_restarted({"m"}, loading={"m"})
        return 0, "Remote end closed connection without response"

    server.reload = dies_meanwhile  # type: ignore[method-assign]
    work()
    assert reloads == ["m"] and server.unloads == []
    assert supervisor.status()["models"]["m"]["recovering"] == "loading it again after tritonserver's restart"
