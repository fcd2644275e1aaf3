"""Engines behind one contract, and the simulator as a plug-in the package serves without.

Every registered engine is reached through an ``EngineDriver`` (the registry's only way in; mypy
checks each subclass). A child interpreter blocks every import of ``ge_python_backend.sim`` before anything else runs,
imports each module of ``engines/``, ``serving/``, ``triton/`` and ``repository/``, generates a
model folder for an ONNX model and answers requests through GEModel, compared with ONNX Runtime
called directly. The registry leaves the plug-in out with a warning naming it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ge_python_backend.engines.registry import ONNX, EngineDriver, EngineInfo, registered
from ge_python_backend.errors import ConfigError

CHILD = textwrap.dedent(
    """
    import importlib, importlib.abc, logging, pkgutil, sys
    from pathlib import Path

    class NoSimulator(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "ge_python_backend.sim" or name.startswith("ge_python_backend.sim."):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, NoSimulator())
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    import numpy as np
    from ge_python_backend.testing import ModelHarness, install_fake_pb_utils, models

    pb_utils = install_fake_pb_utils()  # the triton layer imports pb_utils, as inside a stub
    for layer in ("engines", "serving", "triton", "repository"):
        package = importlib.import_module(f"ge_python_backend.{layer}")
        for module in pkgutil.walk_packages(package.__path__, f"ge_python_backend.{layer}."):
            importlib.import_module(module.name)

    from ge_python_backend.engines import registered
    from ge_python_backend.repository.generate import GenerateOptions, generate
    from ge_python_backend.triton.model import GEModel

    work = Path(sys.argv[1])
    onnx_file = models.linear(work / "linear.onnx")
    folder = generate(onnx_file, work / "repo", GenerateOptions(name="linear")).model_dir
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    with ModelHarness(GEModel, folder) as model:
        [response] = model.infer([pb_utils.InferenceRequest([pb_utils.Tensor("x", x)])])
    assert response.error() is None, response.error()
    got = {t.name(): t.as_numpy() for t in response.output_tensors()}
    expected = models.reference(onnx_file, {"x": x})
    assert got.keys() == expected.keys() and all(np.array_equal(got[n], expected[n]) for n in got), (got, expected)
    assert "acl-sim" not in registered(), sorted(registered())
    loaded = sorted(m for m in sys.modules if m.startswith("ge_python_backend.sim"))
    assert not loaded, loaded
    print("served", sorted(registered()))
    """
)


def test_the_package_imports_generates_and_serves_with_the_simulator_blocked(tmp_path: Path):
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=240, check=False
    )
    assert child.returncode == 0, child.stdout + child.stderr
    assert "served ['acl', 'onnxruntime']" in child.stdout
    # the registry names the plug-in it left out, and why
    assert "engine plug-in 'acl-sim'" in child.stderr and "is blocked in this test" in child.stderr


def test_every_registered_engine_is_reached_through_an_engine_driver():
    drivers = {name: info.driver() for name, info in registered().items()}
    assert set(drivers) >= {"onnxruntime", "acl", "acl-sim"}
    assert all(isinstance(driver, EngineDriver) for driver in drivers.values())
    assert drivers["acl"] is drivers["acl-sim"]  # one implementation, two pyACLs


def test_an_engine_module_without_a_driver_is_refused_naming_it():
    info = EngineInfo("broken", "json", ONNX, "model.onnx", npu=False, summary="no driver")
    with pytest.raises(ConfigError, match="engine 'broken': json.DRIVER is not an EngineDriver"):
        info.own_parameters()
