"""Injected device faults, half-way load failures and load/unload cycles, through a real tritonserver.

One server in explicit model-control mode serves acl-sim models whose config carries
``acl_sim_faults``. Every stub process appends a line to the simulator's ledger file
(GE_ACL_SIM_LEDGER_FILE) when pyACL is finalized, listing what was still allocated: each line
must list nothing. Requests are sent one at a time where a fault's position matters, so each
request is one Triton execution and one engine call.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ge_python_backend.ops.bench import metrics
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.sim import LEDGER_ENV
from tests.support import reliability_repos as rr

pytestmark = pytest.mark.e2e
#: 50 load/unload cycles: 10 of each of 5 models, the models cycled at once (a load or an unload
#: mostly waits on tritonserver's stub start and stop, not on the CPU)
CYCLED = tuple(f"cycled_{i}" for i in range(5))
CYCLES = 10
DEADLINE = 60.0


def one_instance(repo: Path, om: Path, name: str, parameters: dict | None = None, **options) -> Path:
    """An acl-sim model with one instance: a fault's position counts the calls of one process."""
    return rr.model(repo, om, name, parameters, instance_count=1, **options)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    repo = root / "repo"
    sources = rr.Sources(root / "sources")
    om = sources.linear_om
    one_instance(repo, om, "exec_fault", {"acl_sim_faults": "execute_async:3"})
    one_instance(repo, om, "memcpy_fault", {"acl_sim_faults": "memcpy_async:5"})
    one_instance(repo, om, "device_lost", {"acl_sim_faults": "execute_async:4=lost"})
    one_instance(repo, om, "malloc_fault", {"acl_sim_faults": "malloc:10"}, streams=2)
    one_instance(repo, om, "malloc_host_fault", {"acl_sim_faults": "malloc_host:5"}, streams=2)
    one_instance(repo, om, "load_fault", {"acl_sim_faults": "load_from_file_with_mem:2"}, streams=2)
    folder = one_instance(repo, om, "om_truncated", streams=2)
    (folder / "1" / "model.om").write_bytes(om.read_bytes()[:200])
    folder = one_instance(repo, om, "om_bad_onnx", streams=2)
    (folder / "1" / "model.om").write_bytes(om.read_bytes()[:-50] + bytes(50))  # the embedded ONNX model's end
    for name in CYCLED:
        one_instance(repo, om, name, streams=2)
    return repo, sources, root / "ledger.jsonl"


@pytest.fixture(scope="module")
def server(built):
    repo, _, ledger = built
    with TritonServer(repo, model_control_mode="explicit", env={LEDGER_ENV: str(ledger)}) as running:
        yield running


class Ledger:
    """The lines stub processes wrote to the simulator's ledger file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def after(self, count: int, new: int) -> list[dict]:
        """Wait for ``new`` lines after the first ``count``; return the new lines."""
        deadline = time.monotonic() + DEADLINE
        while len(lines := self.lines()) < count + new and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(lines) >= count + new, f"only {len(lines) - count} of {new} stub(s) wrote their ledger line"
        return lines[count:]


def stubs(server, model: str) -> list[int]:
    """Python backend stub processes of ``server`` serving ``model``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if (
            parent == server.process.pid
            and command[0].endswith(b"triton_python_backend_stub")
            and len(command) > 1
            and command[1].endswith(f"/{model}/1/model.py".encode())
        ):
            found.append(int(entry.name))
    return found


def state(client, model: str) -> tuple[str, str]:
    entry = next(e for e in client.get_model_repository_index() if e["name"] == model)
    return entry.get("state", ""), entry.get("reason", "")


def unload(server, client, model: str) -> None:
    """Unload and wait until the model is gone and its stub process has exited."""
    client.unload_model(model)
    deadline = time.monotonic() + DEADLINE
    while (state(client, model)[0] != "UNAVAILABLE" or stubs(server, model)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state(client, model)[0] == "UNAVAILABLE" and not stubs(server, model), model


def infer(client, model: str, x: np.ndarray):
    tensor = httpclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor]).as_numpy("probs")


def one_at_a_time(client, model: str, session, count: int, seed: int, status: str = "500") -> list[str | None]:
    """``count`` requests in sequence; None for a correct answer, else the error message (whose
    HTTP status must be ``status``: 500 for an engine failure, 503 once out of service)."""
    rng = np.random.default_rng(seed)
    results = []
    for _ in range(count):
        x = rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)
        try:
            np.testing.assert_allclose(infer(client, model, x), session.run(None, {"x": x})[1], atol=1e-5)
            results.append(None)
        except InferenceServerException as exc:
            assert exc.status() == status, exc
            results.append(exc.message())
    return results


def model_metric(server, name: str, model: str, **labels: str) -> float:
    """A GEModel metric. Failures and health changes are flushed before the answer is sent."""
    return metrics.fetch(server.metrics_url).value(name, model=model, **labels)


@pytest.mark.parametrize(
    "model, failing, message",
    [
        ("exec_fault", 2, "acl.mdl.execute_async returned 507011 ACL_ERROR_RT_MODEL_EXECUTE"),
        (
            "memcpy_fault",
            1,
            "acl.rt.memcpy_async returned 507000 ACL_ERROR_RT_INTERNAL_ERROR (runtime internal error) "
            "while copying output 'logits' to the host",
        ),
    ],
)
def test_a_transient_fault_fails_only_its_batch_and_the_model_recovers(server, built, model, failing, message):
    repo, sources, ledger_file = built
    ledger, client = Ledger(ledger_file), httpclient.InferenceServerClient(server.http_address)
    session = ort.InferenceSession(str(sources.linear))
    client.load_model(model)
    results = one_at_a_time(client, model, session, 6, seed=failing)
    assert [i for i, r in enumerate(results) if r] == [failing]
    assert message in results[failing] and "injected failure" in results[failing]
    assert one_at_a_time(client, model, session, 20, seed=7) == [None] * 20
    assert model_metric(server, "ge_request_failures", model, kind="engine") == 1
    assert model_metric(server, "ge_engine_healthy", model) == 1
    count = len(ledger.lines())
    unload(server, client, model)
    assert [line["live"] for line in ledger.after(count, 1)] == [[]]


def test_device_lost_takes_the_model_out_of_service_until_it_is_reloaded(server, built):
    repo, sources, ledger_file = built
    ledger, client = Ledger(ledger_file), httpclient.InferenceServerClient(server.http_address)
    session = ort.InferenceSession(str(sources.linear))
    client.load_model("device_lost")
    # A fatal failure answers 503 (UNAVAILABLE): another instance may serve the request.
    results = one_at_a_time(client, "device_lost", session, 7, seed=3, status="503")
    assert results[:3] == [None] * 3
    assert "acl.mdl.execute_async returned 507899 ACL_ERROR_RT_DRV_INTERNAL_ERROR" in results[3]
    for later in results[4:]:
        assert later.startswith(
            "the model is out of service after a fatal engine failure (acl.mdl.execute_async returned 507899"
        )
        assert later.endswith("reload it once the device is back")
    assert (
        "engine failed fatally, refusing every request from now on: acl.mdl.execute_async returned 507899"
        in server.log_text()
    )
    assert model_metric(server, "ge_engine_healthy", "device_lost") == 0
    assert model_metric(server, "ge_request_failures", "device_lost", kind="engine") == 4
    # Triton 24.10 has no readiness hook for Python models: the model still reports READY.
    assert client.is_model_ready("device_lost")
    count = len(ledger.lines())
    unload(server, client, "device_lost")
    assert [line["live"] for line in ledger.after(count, 1)] == [[]]
    client.load_model("device_lost")
    assert one_at_a_time(client, "device_lost", session, 3, seed=4) == [None] * 3
    assert model_metric(server, "ge_engine_healthy", "device_lost") == 1
    count = len(ledger.lines())
    unload(server, client, "device_lost")
    assert [line["live"] for line in ledger.after(count, 1)] == [[]]


@pytest.mark.parametrize(
    "model, message",
    [
        (
            "malloc_fault",
            "acl.rt.malloc returned 207001 ACL_ERROR_RT_MEMORY_ALLOCATION (memory allocation error, only used by "
            "out of memory) while allocating 96 bytes for output 'logits' of slot 1",
        ),
        ("malloc_host_fault", "acl.rt.malloc_host returned 200000 ACL_ERROR_BAD_ALLOC"),
        (
            "load_fault",
            "acl.mdl.load_from_file_with_mem returned 545001 ACL_ERROR_GE_LOAD_MODEL (model load failed) while loading",
        ),
        (
            "om_truncated",
            "acl.mdl.load_from_file returned 100013 ACL_ERROR_PARSE_MODEL (model could not be parsed) while loading",
        ),
        (
            "om_bad_onnx",
            "acl.mdl.load_from_file_with_mem returned 100013 ACL_ERROR_PARSE_MODEL (model could not be parsed) "
            "while loading",
        ),
    ],
)
def test_a_load_that_fails_half_way_frees_everything(server, built, model, message):
    ledger, client = Ledger(built[2]), httpclient.InferenceServerClient(server.http_address)
    count = len(ledger.lines())
    with pytest.raises(InferenceServerException) as failure:
        client.load_model(model)
    assert f"load failed for model '{model}'" in failure.value.message()
    assert f"model '{model}': {message}" in failure.value.message()
    status, reason = state(client, model)
    assert status == "UNAVAILABLE" and message in reason
    assert [line["live"] for line in ledger.after(count, 1)] == [[]]
    deadline = time.monotonic() + DEADLINE
    while stubs(server, model) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stubs(server, model)


def test_load_unload_cycles_leave_no_allocation_and_no_process_behind(server, built):
    repo, sources, ledger_file = built
    ledger, session = Ledger(ledger_file), ort.InferenceSession(str(sources.linear))
    count = len(ledger.lines())
    failures: list[str] = []

    def cycle(model: str, seed: int) -> None:
        client = httpclient.InferenceServerClient(server.http_address)
        rng = np.random.default_rng(seed)
        try:
            for _ in range(CYCLES):
                client.load_model(model)
                x = rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)
                np.testing.assert_allclose(infer(client, model, x), session.run(None, {"x": x})[1], atol=1e-5)
                unload(server, client, model)
        except Exception as exc:  # reported by the test thread below
            failures.append(f"{model}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=cycle, args=(model, seed)) for seed, model in enumerate(CYCLED)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    lines = ledger.after(count, CYCLES * len(CYCLED))
    assert len(lines) == CYCLES * len(CYCLED)
    assert all(line["live"] == [] for line in lines), [line for line in lines if line["live"]][:3]
    assert len({line["pid"] for line in lines}) == len(lines)  # one stub process per load
    assert not any(stubs(server, model) for model in CYCLED)
    assert all(not os.path.exists(f"/proc/{line['pid']}") for line in lines)
