"""Options and repository together: every derived value, and the checks that need both.

- NPUs per pod: 1 when a model needs an NPU, else 0; a model that needs one with ``--npus 0`` is
  refused. Inside a pod that requested N chips, ACL sees logical device ids 0..N-1 whatever the
  host ids are (the device plugin sets ``ASCEND_VISIBLE_DEVICES`` to the physical ids; ACL counts
  over the visible devices), so a config whose ``device_ids`` fall outside 0..N-1 is refused and
  one that leaves chips idle is warned about.
- Shared memory: Triton's Python backend gives every model instance (stub process) a region in
  ``/dev/shm`` that starts at ``shm-default-byte-size`` and grows for the tensors in flight.
- Startup budget: loading happens before tritonserver listens; each model copy (acl: one per
  instance and stream) gets ``--startup-seconds-per-copy``.
- User: device nodes belong to the host's HwHiAiUser group, so a non-root pod with NPUs needs
  that group (``--device-group``); without it the pod runs as root.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.access import Api
from ge_python_backend.ops.deploy.facts import ModelFacts, RepositoryFacts
from ge_python_backend.ops.deploy.options import Autoscaler, ControlMode, DeployOptions, DeviceType, ModelSource
from ge_python_backend.ops.deploy.quantities import GIB, MIB, gibibytes, mebibytes, parse_bytes

#: Per model instance: the region the Python backend creates first, and its growth step (bytes).
SHM_DEFAULT_BYTES = 16 * MIB
SHM_GROWTH_BYTES = 16 * MIB
#: Room for one batch's tensors when the config's dims are variable.
SHM_UNKNOWN_BATCH_BYTES = 64 * MIB
SHM_MARGIN_BYTES = 64 * MIB
SHM_MINIMUM_BYTES = 256 * MIB
#: What the server needs besides /dev/shm inside the memory limit (a memory-backed emptyDir counts there).
SERVER_MEMORY_BYTES = 1 * GIB
#: Seconds before the first model starts loading (image pull excluded: the startup probe starts after it).
STARTUP_BASE_SECONDS = 60
PROBE_PERIOD_SECONDS = 10
NON_ROOT_USER = 1000


@dataclass(frozen=True)
class ResolvedDeployment:
    """Everything the manifests and the Dockerfile are written from."""

    options: DeployOptions
    facts: RepositoryFacts
    npus: int
    run_as_user: int
    run_as_group: int
    shm_bytes: int
    startup_seconds: int
    pvc_size: str
    base_image: str
    node_selector: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]

    @property
    def startup_failure_threshold(self) -> int:
        return math.ceil(self.startup_seconds / PROBE_PERIOD_SECONDS)

    @property
    def shm_size(self) -> str:
        return mebibytes(self.shm_bytes)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.facts.models)


def resolve_options(options: DeployOptions, facts: RepositoryFacts) -> ResolvedDeployment:
    """Resolve what ``options`` leave to the repository; ConfigError when the two disagree."""
    warnings: list[str] = []
    npus = _npus(options, facts, warnings)
    _check_device_ids(facts.models, npus, options.npus is None, warnings)
    user, group = _user(options, npus, warnings)
    _check_queue_target(options, facts)
    shm = _shm_bytes(options, facts)
    memory_limit = options.memory_limit_bytes
    if shm + SERVER_MEMORY_BYTES > memory_limit:
        raise ConfigError(
            f"--shm-size {mebibytes(shm)} does not fit in --memory-limit {options.memory_limit or options.memory} "
            f"with {gibibytes(SERVER_MEMORY_BYTES)} left for the server (a memory-backed /dev/shm counts against "
            "the container's memory limit): raise --memory/--memory-limit or lower --shm-size"
        )
    base_image = options.base_image or options.device_type.default_base_image()
    if base_image is None:
        raise ConfigError(
            f"--device-type {options.device_type}: there is no official CANN image for it; pass --base-image "
            "with a CANN image for your chip (Ubuntu 22.04, Python 3.10-3.12)"
        )
    if options.device_type is DeviceType.ASCEND910 and options.base_image is None:
        warnings.append(
            f"--device-type Ascend910: the Dockerfile's base image defaults to the 910B CANN image ({base_image}); "
            "pass --base-image for first-generation Ascend 910 or Atlas A3"
        )
    if options.model_source is ModelSource.IMAGE and options.kserve:
        warnings.append("--kserve with --model-source image: the InferenceService has no storageUri")
    warnings += _open_api_warnings(options)
    warnings += _compile_at_load_warnings(facts)
    node_selector = options.node_selector
    if node_selector is None:
        node_selector = (options.device_type.node_label,) if npus else ()
    copies = facts.copies
    startup = STARTUP_BASE_SECONDS + options.startup_seconds_per_copy * copies
    pvc_size = options.pvc_size or gibibytes(2 * facts.size_bytes)
    return ResolvedDeployment(
        options=options,
        facts=facts,
        npus=npus,
        run_as_user=user,
        run_as_group=group,
        shm_bytes=shm,
        startup_seconds=startup,
        pvc_size=pvc_size,
        base_image=base_image,
        node_selector=node_selector,
        warnings=tuple(warnings),
    )


def _compile_at_load_warnings(facts: RepositoryFacts) -> list[str]:
    """A model shipped as .onnx/.pb is compiled with ATC when each pod starts (engines.compile): the
    image needs atc, every replica pays the compile, and the startup budget does not count it."""
    compiled = [m.name for m in facts.models if m.compiled]
    if not compiled:
        return []
    return [
        f"model(s) {', '.join(compiled)} hold an .onnx or .pb that every pod compiles with ATC when it starts "
        "(minutes for a large model, into the pod's own cache, and the startup probe allows "
        "--startup-seconds-per-copy for each model copy): the image needs CANN's toolkit with atc on PATH; "
        "ship the compiled model.om instead (ge-triton atc-cmd prints the command the load runs), or point "
        "parameter atc_cache_dir at a volume the pods share"
    ]


def _open_api_warnings(options: DeployOptions) -> list[str]:
    """What an opt-out of the default restrictions leaves open to every client that reaches a pod."""
    found = []
    if options.model_control_mode is ControlMode.EXPLICIT and Api.MODEL_REPOSITORY not in options.restricted_apis:
        found.append(
            "--model-control-mode explicit with the model-repository API open (--restricted-apis): any client that "
            "reaches a pod can load models, including uploaded Python code, which runs in the server"
        )
    if options.http_inference:
        found.append(
            "--http-inference on: tritonserver 2.51 aborts on one small HTTP JSON request that declares a huge "
            "shape (--http-max-input-size bounds it from Triton r25.06), so any client that reaches port "
            f"{options.http_port} can stop a replica with one request"
        )
    return found


def _npus(options: DeployOptions, facts: RepositoryFacts, warnings: list[str]) -> int:
    npu_models = [m for m in facts.models if m.npu]
    if options.npus is None:
        return len({d for m in npu_models for d in m.devices_used})
    if options.npus == 0 and npu_models:
        model = npu_models[0]
        raise ConfigError(
            f"--npus 0, but model {model.name!r} runs on engine {model.engine}, which needs an Ascend NPU; "
            "give --npus 1 or more"
        )
    if options.npus and not npu_models:
        engines = ", ".join(sorted({m.engine for m in facts.models}))
        warnings.append(
            f"--npus {options.npus}: no model needs an NPU (engines: {engines}); the pods request "
            f"{options.npus} {options.device_type.resource} anyway"
        )
    return options.npus


def _check_device_ids(models: tuple[ModelFacts, ...], npus: int, derived: bool, warnings: list[str]) -> None:
    npu_models = [m for m in models if m.npu]
    if not npu_models:
        return
    visible = f"0..{npus - 1}" if npus > 1 else "0"
    pod = f"a pod with {npus} NPU{'s' if npus != 1 else ''} (--npus {npus}{', from the ids in use' if derived else ''})"
    for model in npu_models:
        if any(d >= npus for d in model.devices_used):
            ids = ",".join(map(str, model.device_ids))
            raise ConfigError(
                f"model {model.name!r} has device_ids {ids} (config.pbtxt parameter device_ids/device_id), but "
                f"{pod} sees logical device ids {visible} only, whatever the host ids: regenerate it with "
                f"`ge-triton generate --device-ids {','.join(map(str, range(npus)))}` or pass "
                f"--npus {max(model.devices_used) + 1}"
            )
    used = sorted({d for m in npu_models for d in m.devices_used})
    idle = [d for d in range(npus) if d not in used]
    if idle:
        warnings.append(
            f"--npus {npus}: device ids {','.join(map(str, idle))} are used by no model instance (in use: "
            f"{','.join(map(str, used))}); those chips would idle: add instances and device_ids, or lower --npus"
        )


def _check_queue_target(options: DeployOptions, facts: RepositoryFacts) -> None:
    """The batcher holds requests up to max_queue_delay_microseconds on purpose; a target at or
    below that is exceeded at any load, and the autoscaler would run at its maximum."""
    if options.autoscaler is Autoscaler.NONE or not facts.models:
        return
    slowest = max(facts.models, key=lambda m: m.queue_delay_us)
    if options.queue_target_us <= slowest.queue_delay_us:
        raise ConfigError(
            f"--queue-target-us {options.queue_target_us} is not above model {slowest.name!r}'s "
            f"max_queue_delay_microseconds {slowest.queue_delay_us} (the batcher holds requests that long to fill "
            "a batch, so any load would exceed the target): raise --queue-target-us"
        )


def _user(options: DeployOptions, npus: int, warnings: list[str]) -> tuple[int, int]:
    if options.run_as_user is None:
        if npus and options.device_group is None:
            return 0, 0
        user = NON_ROOT_USER
    else:
        user = options.run_as_user
    if user != 0 and npus and options.device_group is None:
        raise ConfigError(
            f"--run-as-user {user} with NPUs needs --device-group GID: the group that owns /dev/davinci* on the "
            "nodes (the driver's HwHiAiUser group; its gid is set when the driver is installed); "
            "or drop --run-as-user to run as root"
        )
    if user == 0 and options.run_as_user == 0 and not npus:
        warnings.append("--run-as-user 0 without NPUs: the pods could run as a non-root user")
    group = options.device_group if options.device_group is not None else user
    return user, group


def _shm_bytes(options: DeployOptions, facts: RepositoryFacts) -> int:
    if options.shm_size is not None:
        return parse_bytes("--shm-size", options.shm_size)
    return max(SHM_MINIMUM_BYTES, math.ceil(shm_needed(facts.models) / (64 * MIB)) * 64 * MIB)


def shm_needed(models: tuple[ModelFacts, ...]) -> int:
    """Bytes of /dev/shm the model instances take (``ge-triton doctor`` checks a host against it)."""
    total = SHM_MARGIN_BYTES
    for model in models:
        batch = model.io_bytes if model.io_bytes is not None else SHM_UNKNOWN_BATCH_BYTES
        # Batches in flight per instance: one per slot plus the one Triton gathers meanwhile; each
        # lives in the region (inputs in, outputs back), rounded up to the growth step.
        in_flight = (model.streams + 1) * batch
        per_instance = SHM_DEFAULT_BYTES + math.ceil(in_flight / SHM_GROWTH_BYTES) * SHM_GROWTH_BYTES
        total += model.versions * model.instances * per_instance
    return total
