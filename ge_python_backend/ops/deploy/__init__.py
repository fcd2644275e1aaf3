"""``ge-triton deploy``: Kubernetes manifests and an image build context for serving a model
repository with tritonserver on Ascend nodes.

    options (options.py) + the repository (facts.py) -> the resolved deployment (resolved.py)
    -> objects (manifests.py) and the image context (dockerfile.py) -> files (writer.py)
"""

from __future__ import annotations

from pathlib import Path

from ge_python_backend.ops.deploy.facts import ModelFacts, RepositoryFacts, read_repository
from ge_python_backend.ops.deploy.manifests import Manifest, build_manifests
from ge_python_backend.ops.deploy.options import (
    AccessMode,
    Autoscaler,
    ControlMode,
    DeployOptions,
    DeviceType,
    DriverMounts,
    ModelSource,
    PullPolicy,
    Rollout,
    Spread,
)
from ge_python_backend.ops.deploy.resolved import ResolvedDeployment, resolve_options
from ge_python_backend.ops.deploy.writer import Written, summary, write_deployment


def resolve_deployment(repository: Path, options: DeployOptions) -> ResolvedDeployment:
    """Read and check ``repository`` and resolve ``options`` against it (nothing is written)."""
    return resolve_options(options, read_repository(Path(repository)))


def deploy(
    repository: Path, out: Path, options: DeployOptions, force: bool = False
) -> tuple[ResolvedDeployment, Written]:
    """Write the deployment of ``repository`` into ``out``."""
    resolved = resolve_deployment(repository, options)
    return resolved, write_deployment(resolved, Path(out), force)


__all__ = [
    "AccessMode",
    "Autoscaler",
    "ControlMode",
    "DeployOptions",
    "ResolvedDeployment",
    "DeviceType",
    "DriverMounts",
    "Manifest",
    "ModelFacts",
    "ModelSource",
    "PullPolicy",
    "RepositoryFacts",
    "Rollout",
    "Spread",
    "Written",
    "build_manifests",
    "deploy",
    "resolve_options",
    "resolve_deployment",
    "read_repository",
    "summary",
    "write_deployment",
]
