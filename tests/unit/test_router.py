"""The router in process: generate writes it from its members, check and its load refuse what cannot
be routed, and (through the fake pb_utils' BLS to members run in ModelHarness) its answers are its
members', errors keep their code, and unavailable members are skipped."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import read_config_file, set_parameters
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import ModelHarness, triton_args
from ge_python_backend.testing import fake_pb_utils as pb
from ge_python_backend.triton.capabilities import NO_SENDER_ENV
from ge_python_backend.triton.model import GEModel
from ge_python_backend.triton.router import RouterModel
from ge_python_backend.triton.router_settings import RouterSettings


class Member(GEModel):
    pass


class Router(RouterModel):
    pass


def router_options(name: str = "router", **options) -> GenerateOptions:
    members = options.pop("members", "npu,cpu")
    given = {"members": members, **options.pop("template_options", {})}
    return GenerateOptions(name=name, template="router", template_options=given, **options)


@pytest.fixture(scope="module")
def built(tmp_path_factory, onnx_dir):
    """npu (acl-sim over batch gears 1-8, 2 instances) and cpu (onnxruntime), both refusing NaN; a router over them."""
    root = tmp_path_factory.mktemp("router")
    repo = root / "repo"
    sim_compile(onnx_dir / "linear.onnx", root / "linear.om", batch_gears=(1, 2, 4, 8))
    for name, source, count in (("npu", root / "linear.om", 2), ("cpu", onnx_dir / "linear.onnx", 1)):
        folder = generate(source, repo, GenerateOptions(name=name, instance_count=count)).model_dir
        set_parameters(folder / "config.pbtxt", reject_nonfinite="true")
    generated = generate(None, repo, router_options())
    return repo, generated, onnx_dir / "linear.onnx"


@contextmanager
def members_served(repo: Path, names=("npu", "cpu")):
    """The members in ModelHarness, reachable by BLS, one execute at a time each (as Triton calls a
    model instance); yields the calls each one got."""
    calls: Counter[str] = Counter()
    with ExitStack() as stack:
        for name in names:
            harness = stack.enter_context(ModelHarness(Member, repo / name))
            lock = threading.Lock()

            def answer(request, harness=harness, name=name, lock=lock):
                with lock:  # and the outputs copied before the next execute reuses the member's buffers
                    calls[name] += 1
                    (response,) = harness.model.execute([request])
                    tensors = [pb.Tensor(t.name(), t.as_numpy().copy()) for t in response.output_tensors()]
                return pb.InferenceResponse(tensors, response.error())

            pb.bls_models[name] = answer
        try:
            yield calls
        finally:
            pb.bls_models.clear()


def requests_of(rows: list[int], seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [pb.InferenceRequest([pb.Tensor("x", rng.standard_normal((n, 4)).astype(np.float32))]) for n in rows]


def test_generate_writes_the_members_inputs_and_outputs_and_their_limits(built):
    repo, generated, _ = built
    config = read_config_file(generated.model_dir / "config.pbtxt")
    member = read_config_file(repo / "npu" / "config.pbtxt")
    assert list(config.input) == list(member.input) and list(config.output) == list(member.output)
    assert config.max_batch_size == 8 and config.instance_group[0].count == 1
    assert config.parameters["members"].string_value == "npu,cpu"
    assert "member_limits" not in config.parameters  # unset: derived at load
    assert any("npu (up to 16 rows in flight: 2 instance(s) x max_batch_size 8)" in note for note in generated.notes)
    assert check_repository(repo).errors == ()
    settings = RouterSettings.read(triton_args(generated.model_dir))
    assert [(m.name, m.limit) for m in settings.limits] == [("npu", 16), ("cpu", 8)]


def test_answers_are_the_members_own_and_spill_over_in_order(built):
    repo, generated, onnx = built
    session = ort.InferenceSession(str(onnx))
    requests = requests_of([2] * 14)  # 28 rows: 16 to npu, 8 to cpu, 4 wait for the first to free
    with members_served(repo) as calls, ModelHarness(Router, generated.model_dir) as router:
        responses = router.infer(requests)
    for request, response in zip(requests, responses):
        assert not response.has_error(), response.error().message()
        logits, probs = session.run(None, {"x": request.inputs()[0].as_numpy()})
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        np.testing.assert_allclose(got["logits"], logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["probs"], probs, rtol=1e-5, atol=1e-5)
    assert calls["npu"] >= 8 and calls["cpu"] >= 4 and calls["npu"] + calls["cpu"] == 14


def test_a_bad_request_keeps_the_members_code_and_message_and_is_not_retried(built):
    repo, generated, _ = built
    bad = pb.InferenceRequest([pb.Tensor("x", np.full((1, 4), np.nan, np.float32))])
    with members_served(repo, ("cpu",)):
        (direct,) = ModelHarness(Member, repo / "cpu").__enter__().infer([bad])
    with members_served(repo) as calls, ModelHarness(Router, generated.model_dir) as router:
        (routed,) = router.infer([bad])
    assert routed.error().code() == pb.TritonError.INVALID_ARG == direct.error().code()
    assert routed.error().message() == direct.error().message() and "NaN" in routed.error().message()
    assert calls == {"npu": 1}


def router_series(name: str) -> Counter:
    """The fake's values of a router metric, by its extra labels (summed over loads)."""
    values: Counter = Counter()
    for metric in pb.MetricFamily.registry[name].metrics:
        if metric.labels["router"] == "router":
            extra = tuple(v for k, v in sorted(metric.labels.items()) if k in ("member", "cause"))
            values[extra] += metric.value()
    return values


def test_a_member_that_is_not_ready_is_skipped_and_counted(copy):
    set_parameters(copy / "router" / "config.pbtxt", backoff_ms="60000")  # no readiness probe in between
    with members_served(copy, ("cpu",)) as calls, ModelHarness(Router, copy / "router") as router:
        skips, answered = router_series("ge_router_skips_total"), router_series("ge_router_requests_total")
        first = router.infer(requests_of([1]))  # npu answers "not ready": retried on cpu
        second = router.infer(requests_of([3]))  # npu backs off: straight to cpu
        # a member's answer reaches the client before the router's worker counts it: wait for the count
        deadline = time.monotonic() + 10
        while True:
            router.model._metrics.flush()
            counted = router_series("ge_router_requests_total") - answered
            if counted.total() >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        skips, answered = router_series("ge_router_skips_total") - skips, counted
    assert not any(r.has_error() for r in first + second) and calls == {"cpu": 2}
    assert skips == {("unavailable", "npu"): 1, ("backing_off", "npu"): 1}
    assert answered == {("cpu",): 2}


def test_with_no_member_ready_the_request_is_refused_unavailable_naming_each(built):
    _, generated, _ = built
    with ModelHarness(Router, generated.model_dir) as router:
        (response,) = router.infer(requests_of([1]))
    assert response.error().code() == pb.TritonError.UNAVAILABLE
    message = response.error().message()
    assert message.startswith("router 'router': no member can serve the request now")
    assert "Model 'npu' is not ready" in message and "Model 'cpu' is not ready" in message


def test_without_response_senders_answers_are_returned_from_execute(built, monkeypatch):
    repo, generated, onnx = built
    monkeypatch.setenv(NO_SENDER_ENV, "1")
    session = ort.InferenceSession(str(onnx))
    requests = requests_of([1, 8, 3], seed=3)
    with members_served(repo), ModelHarness(Router, generated.model_dir) as router:
        assert not router.model._sender
        responses = router.infer(requests)
    for request, response in zip(requests, responses):
        (logits, _) = session.run(None, {"x": request.inputs()[0].as_numpy()})
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        np.testing.assert_allclose(got["logits"], logits, rtol=1e-5, atol=1e-5)


def test_the_client_timeout_reaches_the_member(built):
    repo, generated, _ = built
    seen = []
    with members_served(repo):
        pb.bls_models["npu"] = lambda request: (
            seen.append(request.timeout())
            or pb.InferenceResponse(
                [pb.Tensor("logits", np.zeros((1, 3), np.float32)), pb.Tensor("probs", np.zeros((1, 3), np.float32))]
            )
        )
        with ModelHarness(Router, generated.model_dir) as router:
            request = pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32))], timeout=5_000_000)
            router.infer([request] + requests_of([1]))
    assert sorted(seen)[0] == 0 and 4_000_000 < sorted(seen)[1] <= 5_000_000


def test_a_router_forwarding_to_a_router_gets_the_error_code_back(built):
    """A router answers a caller that asks for codes (another router) with the tag too."""
    repo, generated, _ = built
    with members_served(repo), ModelHarness(Router, generated.model_dir) as router:
        asking = pb.InferenceRequest(
            [pb.Tensor("x", np.full((1, 4), np.inf, np.float32))], parameters={"ge_error_code": True}
        )
        (response,) = router.infer([asking])
    assert response.error().message().startswith("[ge:INVALID_ARG] ")


# --- what cannot be routed ---------------------------------------------------------------------


def _with_member(repo: Path, name: str, change) -> None:
    config = repo / name / "config.pbtxt"
    text = config.read_text()
    config.write_text(change(text))


@pytest.fixture
def copy(built, tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(built[0], repo)
    return repo


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            "sequence",
            "member 'cpu' uses sequence batching: a router sends each request to whichever member has room",
        ),
        (
            lambda t: t + "model_transaction_policy { decoupled: true }\n",
            "member 'cpu' is decoupled (model_transaction_policy)",
        ),
        (
            lambda t: t.replace("dims: 3\n}\noutput", "dims: 5\n}\noutput", 1),
            "members disagree on output 'logits': 'npu' has TYPE_FP32 [3], 'cpu' has TYPE_FP32 [5]",
        ),
        (
            lambda t: t.replace('name: "probs"', 'name: "scores"'),
            "members disagree: output 'probs' of 'npu' is missing from 'cpu'",
        ),
        (
            lambda t: t.replace("max_batch_size: 8", "max_batch_size: 0"),
            "members disagree on batching: 'npu' has max_batch_size 8",
        ),
    ],
    ids=["sequence", "decoupled", "dims", "name", "batching"],
)
def test_members_that_cannot_be_routed_are_refused_at_generate_check_and_load(built, copy, change, expected):
    if change == "sequence":  # a stateful member, as generate writes one
        generate(built[2], copy, GenerateOptions(name="cpu", sequence=True, overwrite=True))
    else:
        _with_member(copy, "cpu", change)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        generate(None, copy, router_options(name="again"))
    assert not (copy / "again").exists()
    errors = [p.message for p in check_repository(copy).errors if p.path.parent.name == "router"]
    assert any(expected in e for e in errors), errors
    with pytest.raises(pb.TritonModelException, match="model 'router': "):
        ModelHarness(Router, copy / "router").__enter__()


def test_a_router_whose_config_is_not_its_members_is_refused_at_load(copy):
    _with_member(copy, "router", lambda t: t.replace("dims: 4", "dims: 6"))
    with pytest.raises(
        pb.TritonModelException, match="input 'x': the router's config has TYPE_FP32 \\[6\\], its members"
    ):
        ModelHarness(Router, copy / "router").__enter__()


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"member_limits": "gpu=4"}, "member_limits names 'gpu', which is not a member; members: npu, cpu"),
        ({"member_limits": "npu=0"}, "parameter 'member_limits' has value 'npu=0'"),
        ({"members": "npu,ghost"}, "member 'ghost': no "),
        ({"members": "npu,npu"}, "member 'npu' is named twice"),
        ({"members": "router,npu"}, "the router 'router' cannot be its own member"),
        ({"engine": "acl"}, "unknown parameter 'engine'"),
        ({"backoff_ms": "0"}, "parameter 'backoff_ms' has value '0'"),
    ],
)
def test_router_parameters_are_checked_at_load(copy, parameters, expected):
    set_parameters(copy / "router" / "config.pbtxt", **parameters)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        RouterSettings.read(triton_args(copy / "router"))
    assert any(expected in p.message for p in check_repository(copy).errors)


def test_limits_are_divided_among_the_routers_instances_and_may_be_given(copy):
    config = copy / "router" / "config.pbtxt"
    _with_member(copy, "router", lambda t: t.replace("count: 1", "count: 3"))
    set_parameters(config, member_limits="cpu=5")
    settings = RouterSettings.read(triton_args(copy / "router"))
    assert [(m.name, m.limit) for m in settings.limits] == [("npu", 6), ("cpu", 2)]  # ceil(16/3), ceil(5/3)


@pytest.mark.parametrize(
    ("model", "options", "expected"),
    [
        (Path("linear.onnx"), {}, "template 'router' takes no model file"),
        (None, {"engine": "acl"}, "--engine describes a model file; template 'router' has none"),
        (None, {"sequence": True}, "--sequence describes a model file"),
        (None, {"backend": "ge"}, "brings its own model.py"),
        (None, {"members": ""}, "option members is '': name the member models"),
        (None, {"members": "npu,,cpu"}, "option members is 'npu,,cpu'"),
        (None, {"template_options": {"limits": "npu"}}, "option limits: 'npu' is not member=rows"),
    ],
)
def test_generate_refuses_what_a_router_cannot_have(built, tmp_path, model, options, expected):
    repo = built[0]
    with pytest.raises(ConfigError, match=expected):
        generate(model, repo, router_options(name="refused", **options))
    assert not (repo / "refused").exists()


def test_the_router_template_is_listed_and_its_model_py_reads_as_a_router(built):
    from ge_python_backend.repository.modelcode import read_model_code
    from ge_python_backend.repository.templates import available_templates, load_template

    assert "router" in available_templates()
    assert load_template("router").source == "members"
    code = read_model_code(built[1].model_dir / "1" / "model.py")
    assert code.router and code.problem is None
    assert json.loads(triton_args(built[1].model_dir)["model_config"])["backend"] == "python"


def test_a_member_out_of_service_answers_unavailable_and_the_request_is_served_by_the_next(built, copy):
    """The NPU copy loses its device (a fatal code, GEModel answers UNAVAILABLE, tagged for the
    router): the request that met it is answered by the CPU copy, and the NPU copy backs off."""
    set_parameters(copy / "npu" / "config.pbtxt", acl_sim_faults="execute_async:1=507010")
    set_parameters(copy / "router" / "config.pbtxt", backoff_ms="60000")  # no readiness probe in between
    session = ort.InferenceSession(str(built[2]))
    first_request, second_request = requests_of([2], seed=5), requests_of([2], seed=5)
    with members_served(copy) as calls, ModelHarness(Router, copy / "router") as router:
        (first,) = router.infer(first_request)
        (second,) = router.infer(second_request)
    for response in (first, second):
        assert not response.has_error(), response.error().message()
        logits, _ = session.run(None, {"x": first_request[0].inputs()[0].as_numpy()})
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        np.testing.assert_allclose(got["logits"], logits, rtol=1e-5, atol=1e-5)
    assert calls == {"npu": 1, "cpu": 2}  # the second request skipped the NPU copy, backing off


def test_the_bls_thread_pool_is_read_from_the_servers_command_line():
    """python_backend's thread-pool-size (BLS requests a model instance runs at once), 32 unless set."""
    import subprocess
    import sys

    from ge_python_backend.triton.router_settings import DEFAULT_BLS_THREADS, bls_threads

    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    configured = subprocess.Popen([*sleeper, "--backend-config=python,thread-pool-size=77"])
    plain = subprocess.Popen([*sleeper, "--backend-config=python,shm-default-byte-size=1048576"])
    try:
        assert bls_threads(configured.pid) == 77
        assert bls_threads(plain.pid) == DEFAULT_BLS_THREADS == 32
    finally:
        for process in (configured, plain):
            process.kill()
            process.wait()


def test_a_request_parameter_bls_cannot_carry_is_refused_as_the_clients_error(built):
    repo, generated, _ = built
    with members_served(repo) as calls, ModelHarness(Router, generated.model_dir) as router:
        odd = pb.InferenceRequest([pb.Tensor("x", np.ones((1, 4), np.float32))], parameters={"scale": 1.5})
        (response,) = router.infer([odd])
    assert response.error().code() == pb.TritonError.INVALID_ARG
    assert "request parameter 'scale' is 1.5: the router forwards bool, integer" in response.error().message()
    assert not calls
