"""What ``ge-triton deploy`` may be told: typed options, each checked alone, with safe defaults.

``None`` means "derive it from the repository" (``resolved.py`` does that). Every check names the
flag, what was expected and what came, so a wrong flag is a one-line CLI error, never a manifest
that applies and then fails.

Device facts (resource names, node labels, taints) follow Huawei's Ascend device plugin,
MindCluster ``component/ascend-common/api/default_name.go`` and the plugin's DaemonSet
``component/ascend-device-plugin/build/ascendplugin.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.access import OPERATOR_APIS, Api
from ge_python_backend.ops.deploy.quantities import parse_bytes, parse_cpu
from ge_python_backend.params import Choice

E = TypeVar("E", bound=Choice)

#: Official CANN images (Ascend/cann-container-image, published on quay.io), one tag per chip
#: family, each a manifest list for linux/amd64 and linux/arm64.
CANN_IMAGE_REPOSITORY = "quay.io/ascend/cann"
CANN_IMAGE_VERSION = "8.3.rc2"
CANN_IMAGE_OS = "ubuntu22.04-py3.11"

#: Linux capabilities (capabilities(7)), as Kubernetes names them (without CAP_).
LINUX_CAPABILITIES = frozenset(
    (
        "AUDIT_CONTROL",
        "AUDIT_READ",
        "AUDIT_WRITE",
        "BLOCK_SUSPEND",
        "BPF",
        "CHECKPOINT_RESTORE",
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "IPC_LOCK",
        "IPC_OWNER",
        "KILL",
        "LEASE",
        "LINUX_IMMUTABLE",
        "MAC_ADMIN",
        "MAC_OVERRIDE",
        "MKNOD",
        "NET_ADMIN",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_RAW",
        "PERFMON",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_CHROOT",
        "SYS_MODULE",
        "SYS_NICE",
        "SYS_PACCT",
        "SYS_PTRACE",
        "SYS_RAWIO",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "SYSLOG",
        "WAKE_ALARM",
    )
)

#: Longest --name: the generated objects append at most "-grpc-headless" (KServe: "-predictor-<hash>").
NAME_MAX = 40


class DeviceType(Choice):
    """The Ascend device plugin's whole-chip resources (``huawei.com/<value>``)."""

    ASCEND310P = "Ascend310P"  # Atlas inference series (300I Pro/Duo)
    ASCEND310 = "Ascend310"  # Atlas 200/300/500
    ASCEND910 = "Ascend910"  # Atlas training series and 800I A2 (910B)
    NPU = "npu"  # Atlas 350/850/950

    @property
    def resource(self) -> str:
        """The extended resource a pod requests."""
        return f"huawei.com/{self.value}"

    @property
    def node_label(self) -> tuple[str, str]:
        """The label the device plugin's nodes carry (``accelerator=huawei-<type>``)."""
        return "accelerator", f"huawei-{self.value}"

    @property
    def cann_chip(self) -> str | None:
        """The chip part of the official CANN image tag; None when no official image fits."""
        return {"Ascend310P": "310p", "Ascend910": "910b"}.get(self.value)

    def default_base_image(self) -> str | None:
        chip = self.cann_chip
        return f"{CANN_IMAGE_REPOSITORY}:{CANN_IMAGE_VERSION}-{chip}-{CANN_IMAGE_OS}" if chip else None


class Autoscaler(Choice):
    HPA = "hpa"  # HorizontalPodAutoscaler on a prometheus-adapter metric
    KEDA = "keda"  # KEDA ScaledObject with a Prometheus trigger
    NONE = "none"


class ModelSource(Choice):
    PVC = "pvc"  # the repository on a PersistentVolumeClaim mounted read-only
    IMAGE = "image"  # the repository copied into the image


class AccessMode(Choice):
    READ_WRITE_MANY = "ReadWriteMany"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_ONCE = "ReadWriteOnce"


class PullPolicy(Choice):
    IF_NOT_PRESENT = "IfNotPresent"
    ALWAYS = "Always"
    NEVER = "Never"


class ControlMode(Choice):
    NONE = "none"  # load every model of the repository at start; no load/unload API, so no in-pod recovery
    EXPLICIT = "explicit"  # load the models deploy found (--load-model each); serve reloads a broken one


class DriverMounts(Choice):
    RUNTIME = "runtime"  # Ascend Docker Runtime mounts the driver (the device plugin's default path)
    HOSTPATH = "hostpath"  # mount the driver from the host (no Ascend Docker Runtime)


class Spread(Choice):
    PREFERRED = "preferred"  # pod anti-affinity per node, preferred
    REQUIRED = "required"  # at most one pod per node


class Rollout(Choice):
    SURGE = "surge"  # start a new pod before stopping an old one (needs spare NPUs)
    REPLACE = "replace"  # stop one old pod first (no spare NPUs needed; one pod less meanwhile)


def choice(flag: str, kind: type[E], raw: str | E) -> E:
    """The member of ``kind`` whose value is ``raw``; ConfigError listing the accepted values."""
    if isinstance(raw, kind):
        return raw
    for member in kind:
        if member.value == raw:
            return member
    accepted = ", ".join(m.value for m in kind)
    raise ConfigError(f"{flag} {raw!r}: expected one of {accepted}")


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_IMAGE = re.compile(
    r"^[a-zA-Z0-9][a-zA-Z0-9.\-]*(:[0-9]+)?(/[a-z0-9]+([._\-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
_DURATION = re.compile(r"^[1-9][0-9]*(ms|s|m|h)$")


def check_dns_label(flag: str, value: str, longest: int = 63) -> str:
    if len(value) > longest or not _DNS_LABEL.match(value):
        raise ConfigError(
            f"{flag} {value!r}: expected a DNS label of at most {longest} characters "
            "(lower-case letters, digits and '-', starting and ending with a letter or digit)"
        )
    return value


def check_dns_subdomain(flag: str, value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ConfigError(
            f"{flag} {value!r}: expected a Kubernetes object name (lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return value


def check_image(flag: str, value: str) -> str:
    tagged = ":" in value.rsplit("/", 1)[-1] or "@" in value
    if not _IMAGE.match(value) or not tagged:
        raise ConfigError(
            f"{flag} {value!r}: expected an image reference such as registry.example.com/team/ge-triton:0.1.0 "
            "(with a tag or digest)"
        )
    return value


def check_label(flag: str, pair: tuple[str, str]) -> tuple[str, str]:
    """A Kubernetes label KEY=VALUE: KEY is [prefix/]name, both parts and VALUE as Kubernetes allows."""
    key, value = pair
    prefix, _, name = key.rpartition("/")
    good_key = len(name) <= 63 and _LABEL_NAME.match(name) and (not prefix or check_prefix(prefix))
    good_value = value == "" or (len(value) <= 63 and _LABEL_NAME.match(value))
    if not (good_key and good_value):
        raise ConfigError(
            f"{flag} {key}={value}: expected a Kubernetes label KEY=VALUE (KEY [prefix/]name, name and VALUE "
            "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    return pair


def check_prefix(prefix: str) -> bool:
    return len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix))


@dataclass(frozen=True)
class DeployOptions:
    """The flags of ``ge-triton deploy``; see ``cli/deploy.py`` for their help."""

    image: str
    name: str = "ge-triton"
    namespace: str = "default"
    device_type: DeviceType = DeviceType.ASCEND310P
    npus: int | None = None  # None: 1 when a model needs an NPU, else 0
    replicas: int = 2
    max_replicas: int | None = None  # None: twice --replicas
    autoscaler: Autoscaler = Autoscaler.HPA
    queue_target_us: int = 10_000
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    kserve: bool = False
    model_source: ModelSource = ModelSource.PVC
    pvc_name: str | None = None  # None: <name>-models
    create_pvc: bool = True
    pvc_size: str | None = None  # None: twice the repository's size, at least 1Gi
    pvc_access_mode: AccessMode = AccessMode.READ_WRITE_MANY
    storage_class: str | None = None  # None: the cluster's default
    image_pull_policy: PullPolicy = PullPolicy.IF_NOT_PRESENT
    image_pull_secrets: tuple[str, ...] = ()
    base_image: str | None = None  # None: the CANN image for the device type
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_control_mode: ControlMode = ControlMode.EXPLICIT
    #: API groups that need the operator key (ops.access); () opens them all
    restricted_apis: tuple[Api, ...] = OPERATOR_APIS
    #: HTTP inference (tritonserver 2.51 aborts on one small HTTP JSON request with a huge shape)
    http_inference: bool = False
    api_key_secret: str | None = None  # None: <name>-api-key
    cpu: str = "2"
    cpu_limit: str | None = None  # None: no CPU limit (no throttling)
    memory: str = "8Gi"
    memory_limit: str | None = None  # None: equal to --memory
    shm_size: str | None = None  # None: sized from the model instances
    startup_seconds_per_copy: int = 60
    node_selector: tuple[tuple[str, str], ...] | None = None  # None: the device type's node label with NPUs
    device_toleration: bool = True
    driver_mounts: DriverMounts = DriverMounts.RUNTIME
    run_as_user: int | None = None  # None: 0 with NPUs (device nodes), 1000 without
    device_group: int | None = None
    #: capabilities the server keeps (all others dropped); None: DAC_OVERRIDE for root with NPUs, else none
    capabilities: tuple[str, ...] | None = None
    spread: Spread = Spread.PREFERRED
    rollout: Rollout = Rollout.SURGE
    monitor: bool = True
    monitor_labels: tuple[tuple[str, str], ...] = ()
    scrape_interval: str = "15s"
    check_repository: bool = True

    def __post_init__(self) -> None:
        check_dns_label("--name", self.name, NAME_MAX)
        check_dns_label("--namespace", self.namespace)
        check_image("--image", self.image)
        if self.base_image is not None:
            check_image("--base-image", self.base_image)
        self._check_counts()
        self._check_resources()
        self._check_storage()
        self._check_scheduling()
        if not re.match(r"^https?://[^\s/]+", self.prometheus_url):
            raise ConfigError(
                f"--prometheus-url {self.prometheus_url!r}: expected an http:// or https:// URL of the Prometheus "
                "server KEDA queries, e.g. http://prometheus-operated.monitoring.svc:9090"
            )
        if not _DURATION.match(self.scrape_interval):
            raise ConfigError(f"--scrape-interval {self.scrape_interval!r}: expected a duration such as 15s, 1m")
        for pair in self.monitor_labels:
            check_label("--monitor-label", pair)

    def _check_counts(self) -> None:
        for flag, value, low, high in (
            ("--replicas", self.replicas, 1, 1000),
            ("--queue-target-us", self.queue_target_us, 1, 3_600_000_000),
            ("--startup-seconds-per-copy", self.startup_seconds_per_copy, 1, 3600),
            ("--http-port", self.http_port, 1, 65535),
            ("--grpc-port", self.grpc_port, 1, 65535),
            ("--metrics-port", self.metrics_port, 1, 65535),
        ):
            _in_range(flag, value, low, high)
        if self.npus is not None:
            _in_range("--npus", self.npus, 0, 64)
        if self.max_replicas is not None:
            _in_range(
                "--max-replicas", self.max_replicas, self.replicas, 1000, f" (at least --replicas {self.replicas})"
            )
        ports = (self.http_port, self.grpc_port, self.metrics_port)
        if len(set(ports)) != 3:
            raise ConfigError(
                f"--http-port {self.http_port}, --grpc-port {self.grpc_port}, --metrics-port {self.metrics_port}: "
                "expected three different ports"
            )
        for flag, ident in (("--run-as-user", self.run_as_user), ("--device-group", self.device_group)):
            if ident is not None:
                _in_range(flag, ident, 0, 2**31 - 1)

    def _check_resources(self) -> None:
        cpu = parse_cpu("--cpu", self.cpu)
        if self.cpu_limit is not None and parse_cpu("--cpu-limit", self.cpu_limit) < cpu:
            raise ConfigError(f"--cpu-limit {self.cpu_limit}: expected at least --cpu {self.cpu}")
        memory = parse_bytes("--memory", self.memory)
        if self.memory_limit is not None and parse_bytes("--memory-limit", self.memory_limit) < memory:
            raise ConfigError(f"--memory-limit {self.memory_limit}: expected at least --memory {self.memory}")
        if self.shm_size is not None:
            parse_bytes("--shm-size", self.shm_size)

    def _check_storage(self) -> None:
        if self.pvc_name is not None:
            check_dns_subdomain("--pvc", self.pvc_name)
        if self.pvc_size is not None:
            parse_bytes("--pvc-size", self.pvc_size)
        if self.storage_class is not None:
            check_dns_subdomain("--storage-class", self.storage_class)
        for secret in self.image_pull_secrets:
            check_dns_subdomain("--image-pull-secret", secret)
        if self.api_key_secret is not None:
            check_dns_subdomain("--api-key-secret", self.api_key_secret)
        if self.model_source is not ModelSource.PVC:
            return
        most = max(self.replicas, self.max_replicas or 2 * self.replicas)
        if self.pvc_access_mode is AccessMode.READ_WRITE_ONCE and most > 1:
            raise ConfigError(
                f"--pvc-access-mode ReadWriteOnce with up to {most} replicas: a ReadWriteOnce volume mounts on one "
                "node only, and the replicas spread over nodes; use ReadWriteMany or ReadOnlyMany, "
                "--model-source image, or --replicas 1 --max-replicas 1"
            )

    def _check_scheduling(self) -> None:
        for name in self.capabilities or ():
            if name not in LINUX_CAPABILITIES:
                raise ConfigError(
                    f"--capabilities {','.join(self.capabilities or ())}: {name!r} is not a Linux capability "
                    "(names as in capabilities(7) without CAP_, e.g. DAC_OVERRIDE; 'none' for none)"
                )
        if self.node_selector is not None:
            for pair in self.node_selector:
                check_label("--node-selector", pair)

    @property
    def resolved_max_replicas(self) -> int:
        return self.max_replicas if self.max_replicas is not None else 2 * self.replicas

    @property
    def resolved_pvc_name(self) -> str:
        return self.pvc_name or f"{self.name}-models"

    @property
    def resolved_api_key_secret(self) -> str:
        return self.api_key_secret or f"{self.name}-api-key"

    @property
    def needs_api_key(self) -> bool:
        """Whether the server's arguments take the operator key (from the Secret)."""
        return bool(self.restricted_apis) or not self.http_inference

    @property
    def memory_limit_bytes(self) -> int:
        return parse_bytes("--memory-limit", self.memory_limit or self.memory)


def _in_range(flag: str, value: int, low: int, high: int, why: str = "") -> None:
    if not low <= value <= high:
        raise ConfigError(f"{flag} {value}: expected an integer from {low} to {high}{why}")


def pairs(flag: str, texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE texts as pairs; ConfigError naming ``flag`` for one without '='."""
    result = []
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {text!r}: expected KEY=VALUE")
        result.append((key, value))
    return tuple(result)
