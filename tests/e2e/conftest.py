"""One real tritonserver (from nvidia-pytriton) for the end-to-end tests of this folder."""

from __future__ import annotations

import pytest

from ge_python_backend.ops.server import TritonServer
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.serving.sequences import parse_state_pairs
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.support import parity, repos


@pytest.fixture(scope="session")
def e2e_repo(tmp_path_factory):
    """The models every end-to-end test may use, with the ONNX files they came from."""
    repo = tmp_path_factory.mktemp("repo")
    sources = tmp_path_factory.mktemp("sources")
    files = {
        "linear": models.linear(sources / "linear.onnx"),
        "two_inputs": models.two_inputs(sources / "two_inputs.onnx"),
    }
    repos.generated(repo, files["linear"], "linear")
    repos.generated(repo, files["linear"], "linear_s2", streams=2)
    repos.generated(repo, files["two_inputs"], "pair", max_batch_size=0)
    repos.generated(repo, files["two_inputs"], "pair_batching", max_batch_size=8)
    repos.generated(repo, files["linear"], "linear_ge", backend="ge")
    _, files["hooked"] = repos.hooked_classifier(repo)
    repos.fragile(repo, files["linear"])
    files["breaker"] = parity.breaker(repo)
    for channels, kind in ((3, "rgb"), (1, "grey")):
        files[f"classifier_{kind}"] = repos.classifier(repo, sources, f"classifier_{kind}", image_channels=channels)
    sim_compile(files["linear"], sources / "linear_sim.om", batch_gears=(1, 2, 4, 8))
    repos.generated(repo, sources / "linear_sim.om", "linear_sim", streams=2)
    # one instance per device: on one device the second's batches would queue behind the first's
    timed = repos.generated(repo, sources / "linear_sim.om", "sim_timed", instance_count=2, device_ids=(0, 1))
    set_parameters(timed / "config.pbtxt", acl_sim_device_ms=str(repos.SIM_DEVICE_MS))
    files["cell"] = models.recurrent_cell(sources / "cell.onnx", layers_first=True, with_gain=True)
    for strategy in ("direct", "oldest"):
        repos.generated(
            repo,
            files["cell"],
            f"cell_{strategy}",
            sequence=True,
            sequence_strategy=strategy,
            states=parse_state_pairs("h_in=h_out"),
            state_batch_axis=1,
            unbatched_inputs=("gain",),
        )
    idle = repos.generated(
        repo,
        files["cell"],
        "cell_idle",
        sequence=True,
        states=parse_state_pairs("h_in=h_out"),
        state_batch_axis=1,
        unbatched_inputs=("gain",),
    )
    set_parameters(idle / "config.pbtxt", sequence_idle_timeout_ms=str(repos.IDLE_TIMEOUT_MS))
    files["linear_v2"] = models.linear(sources / "linear_v2.onnx", seed=1)
    repos.generated(repo, files["linear"], "versioned", version_policy="all")
    repos.generated(repo, files["linear_v2"], "versioned", version=2, add_version=True)
    return repo, files


@pytest.fixture(scope="session")
def server(e2e_repo):
    repo, _ = e2e_repo
    with TritonServer(repo) as running:
        yield running


@pytest.fixture(scope="session")
def sources(e2e_repo):
    return e2e_repo[1]
