"""The Kubernetes objects of a deployment, as plain dicts (one function per object).

Sources for the fields (see docs/deploy.md for the reasoning):

- Ascend device plugin: the resource ``huawei.com/<type>`` with limits equal to requests, the
  node label ``accelerator=huawei-<type>`` and the ``huawei.com/<type>:NoSchedule`` toleration the
  plugin's own DaemonSet carries (MindCluster ``ascendplugin.yaml``); the driver mounts used
  without Ascend Docker Runtime (CANN container image README, ``docker run -v`` list).
- The server is ``ge-triton serve`` (ops/supervised.py): tritonserver 2.51 flags (``tritonserver
  --help``) go through ``--server-arg``; the probes read serve's ``/health/live`` and
  ``/health/ready`` on the metrics port (ops/front.py), which include tritonserver's own health.
- Hardening (docs/security.md): every container drops ALL capabilities on a read-only root
  filesystem, without privilege escalation or a service-account token; writable emptyDirs where
  tritonserver and CANN write (``/tmp``: HOME and working directory; ``/dev/shm``; CANN's logs,
  ``ASCEND_PROCESS_LOG_PATH``). The device plugin hands a pod its NPUs as device nodes with
  cgroup permission ``rw`` (MindCluster ``component/ascend-device-plugin/pkg/server/plugin.go``
  ``mountDevice``); no capability is documented as needed. A root container with NPUs keeps
  ``DAC_OVERRIDE`` only (below).
- Prometheus Operator ``monitoring.coreos.com/v1`` ServiceMonitor/PodMonitor, autoscaling/v2 HPA
  on a Pods metric served by prometheus-adapter, KEDA ``keda.sh/v1alpha1`` ScaledObject with a
  Prometheus trigger (metadata values are strings), KServe ``serving.kserve.io`` ServingRuntime
  (v1alpha1) and InferenceService (v1beta1) in Standard ("RawDeployment") mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ge_python_backend.ops.access import API_KEY_ENV, restriction_args
from ge_python_backend.ops.deploy.options import Autoscaler, ControlMode, DriverMounts, ModelSource, Rollout, Spread
from ge_python_backend.ops.deploy.resolved import (
    NON_ROOT_USER,
    PROBE_PERIOD_SECONDS,
    SHM_DEFAULT_BYTES,
    SHM_GROWTH_BYTES,
    ResolvedDeployment,
)

Object = dict[str, Any]

#: Where the image keeps its prepared Triton backends (Python backend with its stub, and ``ge``).
BACKENDS_DIR = "/opt/ge-triton/backends"
MODELS_DIR = "/models"
KSERVE_MODELS_DIR = "/mnt/models"  # where KServe mounts storageUri
KSERVE_HTTP_PORT = 8080
KSERVE_GRPC_PORT = 9000
KSERVE_CONTAINER = "kserve-container"
KSERVE_MODEL_FORMAT = "ge-triton"
CONTAINER = "tritonserver"
#: The per-pod metric prometheus-adapter serves to the HPA: average queue time per request (µs).
QUEUE_METRIC = "triton_queue_us_per_request"
EXIT_TIMEOUT_SECONDS = 30  # tritonserver waits this long for in-flight requests on SIGTERM
PRE_STOP_SECONDS = 10  # endpoints drop the pod before the server stops accepting
#: CANN's application logs (plog): ASCEND_PROCESS_LOG_PATH comes before $HOME/ascend/log
#: (RT docs/zh/env_vars/ASCEND_PROCESS_LOG_PATH.md:12); an emptyDir of its own, sized apart from /tmp.
ASCEND_LOG_DIR = "/var/log/ascend"
#: The capabilities a root server with NPUs keeps unless --capabilities says otherwise: the device
#: nodes belong to the driver's HwHiAiUser on the host (the runtimes pass the host's owner and mode
#: into the container), and root opens a node it neither owns nor shares a group with only through
#: DAC_OVERRIDE. Unverified on a cluster; --run-as-user with --device-group needs no capability.
ROOT_NPU_CAPABILITIES = ("DAC_OVERRIDE",)


def server_capabilities(resolved: ResolvedDeployment) -> tuple[str, ...]:
    """What the server container keeps of Linux's capabilities (every other one is dropped)."""
    if resolved.options.capabilities is not None:
        return resolved.options.capabilities
    return ROOT_NPU_CAPABILITIES if resolved.run_as_user == 0 and resolved.npus else ()


#: Driver paths a container needs when Ascend Docker Runtime does not mount them (CANN image README).
DRIVER_HOST_PATHS = (
    ("ascend-driver", "/usr/local/Ascend/driver", "Directory"),
    ("ascend-dcmi", "/usr/local/dcmi", "Directory"),
    ("npu-smi", "/usr/local/bin/npu-smi", "File"),
    ("ascend-install-info", "/etc/ascend_install.info", "File"),
)


@dataclass(frozen=True)
class Manifest:
    """One YAML file: where it goes under the output folder, its object and a header comment."""

    path: str
    body: Object
    comment: str = ""
    kubernetes: bool = True  # a Kubernetes object (else: a config file for another tool)
    standard: bool = True  # a built-in kind (validated against the Kubernetes schemas)


# -- names and labels -----------------------------------------------------------------------------


def labels(resolved: ResolvedDeployment, component: str = "inference-server") -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "ge-triton",
        "app.kubernetes.io/instance": resolved.options.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "ge-triton-deploy",
    }


def pod_selector(resolved: ResolvedDeployment) -> dict[str, str]:
    """The labels that pick this deployment's server pods."""
    if resolved.options.kserve:
        return {"serving.kserve.io/inferenceservice": resolved.options.name}
    return {"app.kubernetes.io/name": "ge-triton", "app.kubernetes.io/instance": resolved.options.name}


def metadata(resolved: ResolvedDeployment, name: str, component: str = "inference-server", **extra: Any) -> Object:
    return {"name": name, "namespace": resolved.options.namespace, "labels": labels(resolved, component), **extra}


def scale_target(resolved: ResolvedDeployment) -> str:
    """The Deployment the autoscaler scales (KServe names its own ``<isvc>-predictor``)."""
    return f"{resolved.options.name}-predictor" if resolved.options.kserve else resolved.options.name


# -- the server container -------------------------------------------------------------------------


def server_args(resolved: ResolvedDeployment, models_dir: str, http_port: int, grpc_port: int) -> list[str]:
    """``ge-triton serve`` (its supervisor heals the models, its endpoint on the metrics port has the
    probes), with tritonserver's own flags through ``--server-arg``: among them the restrictions
    with the Secret's key, which serve reads back for its own repository calls (so serve adds none
    itself: ``--restricted-apis=none``, ``--http-inference=on``)."""
    options = resolved.options
    args = [
        "ge-triton",
        "serve",
        models_dir,
        "--address=0.0.0.0",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={options.metrics_port}",
        f"--model-control-mode={options.model_control_mode}",
    ]
    if options.model_control_mode is ControlMode.EXPLICIT:
        args += [f"--load-model={name}" for name in resolved.model_names]
    args += ["--log-file=-", "--restricted-apis=none", "--http-inference=on"]
    triton = [
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}",
        "--allow-metrics=true",
        f"--backend-directory={BACKENDS_DIR}",
        f"--backend-config=python,shm-default-byte-size={SHM_DEFAULT_BYTES}",
        f"--backend-config=python,shm-growth-byte-size={SHM_GROWTH_BYTES}",
        *server_restrictions(resolved),
    ]
    return args + [f"--server-arg={arg}" for arg in triton]


def server_restrictions(resolved: ResolvedDeployment) -> list[str]:
    """The operator key restricts options.restricted_apis (HTTP and gRPC) and, unless
    --http-inference on, HTTP inference; the kubelet expands $(GE_TRITON_API_KEY) from the Secret."""
    options = resolved.options
    if not options.needs_api_key:
        return []
    key = f"$({API_KEY_ENV})"
    return restriction_args(options.restricted_apis, key, http_inference=options.http_inference, off_value=key)


def resources(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    requests: Object = {"cpu": options.cpu, "memory": options.memory}
    limits: Object = {"memory": options.memory_limit or options.memory}
    if options.cpu_limit:
        limits["cpu"] = options.cpu_limit
    if resolved.npus:
        # The device plugin's extended resource: limits must equal requests.
        requests[options.device_type.resource] = resolved.npus
        limits[options.device_type.resource] = resolved.npus
    return {"requests": requests, "limits": limits}


def probes(resolved: ResolvedDeployment, port: str) -> Object:
    """serve's health endpoints on the metrics ``port``: a startup budget for loading every model
    copy; liveness fails once a model is beyond in-process recovery (the container is restarted);
    readiness fails while tritonserver is not ready or any model is broken or being recovered."""
    return {
        "startupProbe": {
            "httpGet": {"path": "/health/live", "port": port},
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": resolved.startup_failure_threshold,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health/live", "port": port},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/health/ready", "port": port},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 1,
        },
    }


def environment(resolved: ResolvedDeployment | None = None) -> list[Object]:
    """The containers' variables; ``resolved`` for the server (CANN's log folder, the operator key).
    HOME is /tmp, a writable emptyDir for any user (the root filesystem is read-only)."""
    env: list[Object] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
    ]
    if resolved is not None:
        env.append({"name": "ASCEND_PROCESS_LOG_PATH", "value": ASCEND_LOG_DIR})
        if resolved.options.needs_api_key:
            secret = {"name": resolved.options.resolved_api_key_secret, "key": "key"}  # not optional: fail closed
            env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": secret}})
    return env


def container_security(resolved: ResolvedDeployment, pod_level: bool, user: Object | None = None) -> Object:
    """A container's securityContext: every capability dropped (the server keeps
    ``server_capabilities``), read-only root filesystem, no escalation. ``user``: a helper's own
    user instead of the pod's (it keeps nothing); without a pod-level context (KServe) the
    server's context carries the pod's user and seccomp profile too."""
    capabilities: Object = {"drop": ["ALL"]}
    kept = server_capabilities(resolved) if user is None else ()
    if kept:
        capabilities["add"] = list(kept)
    fields = user if user is not None else user_fields(resolved)
    context: Object = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": capabilities,
    }
    if user is not None or not pod_level:
        context.update(fields)
    if not pod_level:
        context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def user_fields(resolved: ResolvedDeployment) -> Object:
    fields: Object = {"runAsUser": resolved.run_as_user, "runAsGroup": resolved.run_as_group}
    if resolved.run_as_user != 0:
        fields["runAsNonRoot"] = True
    return fields


def helper_user(resolved: ResolvedDeployment) -> Object:
    """The user of the containers that need no NPU (repository check, model loader): the pod's
    when it is non-root, else uid and gid 1000, never root."""
    if resolved.run_as_user != 0:
        return user_fields(resolved)
    return {"runAsUser": NON_ROOT_USER, "runAsGroup": NON_ROOT_USER, "runAsNonRoot": True}


def volume_mounts(resolved: ResolvedDeployment, models: bool = True, models_read_only: bool = True) -> list[Object]:
    mounts: list[Object] = []
    if models and resolved.options.model_source is ModelSource.PVC and not resolved.options.kserve:
        mounts.append({"name": "models", "mountPath": MODELS_DIR, "readOnly": models_read_only})
    mounts += [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "ascend-log", "mountPath": ASCEND_LOG_DIR},
    ]
    if resolved.npus and resolved.options.driver_mounts is DriverMounts.HOSTPATH:
        mounts += [{"name": name, "mountPath": path, "readOnly": True} for name, path, _ in DRIVER_HOST_PATHS]
    return mounts


def volumes(resolved: ResolvedDeployment) -> list[Object]:
    result: list[Object] = []
    if resolved.options.model_source is ModelSource.PVC and not resolved.options.kserve:
        result.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": resolved.options.resolved_pvc_name, "readOnly": True},
            }
        )
    result += [
        # The Python backend's shared memory: memory-backed, sized for the model instances.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": resolved.shm_size}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}},
        {"name": "ascend-log", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    if resolved.npus and resolved.options.driver_mounts is DriverMounts.HOSTPATH:
        result += [{"name": name, "hostPath": {"path": path, "type": kind}} for name, path, kind in DRIVER_HOST_PATHS]
    return result


def server_container(resolved: ResolvedDeployment, *, kserve: bool) -> Object:
    options = resolved.options
    if kserve:
        models_dir = KSERVE_MODELS_DIR if options.model_source is ModelSource.PVC else MODELS_DIR
        http, grpc = KSERVE_HTTP_PORT, KSERVE_GRPC_PORT
    else:
        models_dir, http, grpc = MODELS_DIR, options.http_port, options.grpc_port
    return {
        "name": KSERVE_CONTAINER if kserve else CONTAINER,
        "image": options.image,
        "imagePullPolicy": str(options.image_pull_policy),
        # args only: the image's ENTRYPOINT sources CANN's set_env.sh, then runs them.
        "args": server_args(resolved, models_dir, http, grpc),
        "workingDir": "/tmp",
        "env": environment(resolved),
        "ports": [
            {"name": "http", "containerPort": http, "protocol": "TCP"},
            {"name": "grpc", "containerPort": grpc, "protocol": "TCP"},
            {"name": "metrics", "containerPort": options.metrics_port, "protocol": "TCP"},
        ],
        "resources": resources(resolved),
        **probes(resolved, "metrics"),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRE_STOP_SECONDS)]}}},
        "securityContext": container_security(resolved, pod_level=not kserve),
        "volumeMounts": volume_mounts(resolved),
    }


def check_container(resolved: ResolvedDeployment) -> Object:
    """An init container that runs ``ge-triton check`` on the mounted repository: an empty or
    broken volume stops the pod with the problems in its log, before any NPU work."""
    res = resources(resolved)
    return {
        "name": "check-repository",
        "image": resolved.options.image,
        "imagePullPolicy": str(resolved.options.image_pull_policy),
        "args": ["ge-triton", "check", MODELS_DIR, "--backend-dir", BACKENDS_DIR],
        "workingDir": "/tmp",
        "env": environment(),
        "resources": {
            "requests": {k: v for k, v in res["requests"].items() if k in ("cpu", "memory")},
            "limits": {k: v for k, v in res["limits"].items() if k in ("cpu", "memory")},
        },
        "securityContext": container_security(resolved, pod_level=True, user=helper_user(resolved)),
        "volumeMounts": [m for m in volume_mounts(resolved) if m["name"] in ("models", "tmp")],
    }


# -- scheduling -----------------------------------------------------------------------------------


def node_selector(resolved: ResolvedDeployment) -> dict[str, str]:
    return dict(resolved.node_selector)


def tolerations(resolved: ResolvedDeployment) -> list[Object]:
    if not resolved.npus or not resolved.options.device_toleration:
        return []
    return [{"key": resolved.options.device_type.resource, "operator": "Exists", "effect": "NoSchedule"}]


def affinity(resolved: ResolvedDeployment) -> Object:
    term = {"labelSelector": {"matchLabels": pod_selector(resolved)}, "topologyKey": "kubernetes.io/hostname"}
    if resolved.options.spread is Spread.REQUIRED:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }


def pod_scheduling(resolved: ResolvedDeployment) -> Object:
    spec: Object = {}
    if resolved.node_selector:
        spec["nodeSelector"] = node_selector(resolved)
    if tolerations(resolved):
        spec["tolerations"] = tolerations(resolved)
    spec["affinity"] = affinity(resolved)
    if resolved.options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in resolved.options.image_pull_secrets]
    return spec


# -- plain Kubernetes objects -----------------------------------------------------------------------


def deployment(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    pod_spec: Object = {
        **pod_scheduling(resolved),
        "securityContext": {**user_fields(resolved), "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,  # the server never talks to the Kubernetes API
        "terminationGracePeriodSeconds": PRE_STOP_SECONDS + EXIT_TIMEOUT_SECONDS + 20,
    }
    if options.check_repository:
        pod_spec["initContainers"] = [check_container(resolved)]
    pod_spec["containers"] = [server_container(resolved, kserve=False)]
    pod_spec["volumes"] = volumes(resolved)
    if options.rollout is Rollout.SURGE:
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    else:
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    spec: Object = {}
    if options.autoscaler is Autoscaler.NONE:
        spec["replicas"] = options.replicas  # with an autoscaler, it owns the count (apply must not reset it)
    spec.update(
        {
            "revisionHistoryLimit": 5,
            "progressDeadlineSeconds": resolved.startup_seconds + 300,
            "selector": {"matchLabels": pod_selector(resolved)},
            "strategy": strategy,
            "template": {
                "metadata": {
                    "labels": {**pod_selector(resolved), "app.kubernetes.io/component": "inference-server"},
                    "annotations": {
                        "kubectl.kubernetes.io/default-container": CONTAINER,
                        "ge-triton.io/models": ",".join(resolved.model_names),
                    },
                },
                "spec": pod_spec,
            },
        }
    )
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(resolved, options.name), "spec": spec}


def service(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(resolved, options.name),
        "spec": {
            "type": "ClusterIP",
            "selector": pod_selector(resolved),
            "ports": [
                {"name": "http", "port": options.http_port, "targetPort": "http", "protocol": "TCP"},
                {
                    "name": "grpc",
                    "port": options.grpc_port,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                {"name": "metrics", "port": options.metrics_port, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def headless_service(resolved: ResolvedDeployment) -> Object:
    """Every ready pod's address in DNS, for gRPC clients that balance per request
    (a ClusterIP balances connections, and one gRPC connection carries every call)."""
    options = resolved.options
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(resolved, f"{options.name}-headless", "grpc-client-balancing"),
        "spec": {
            "clusterIP": "None",
            "selector": pod_selector(resolved),
            "ports": [
                {
                    "name": "grpc",
                    "port": options.grpc_port,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                }
            ],
        },
    }


def persistent_volume_claim(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    spec: Object = {
        "accessModes": [str(options.pvc_access_mode)],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": resolved.pvc_size}},
    }
    if options.storage_class:
        spec["storageClassName"] = options.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(resolved, options.resolved_pvc_name, "model-repository"),
        "spec": spec,
    }


def model_loader(resolved: ResolvedDeployment) -> Object:
    """A pod that mounts the claim read-write, for copying the repository in (``kubectl exec ... tar``)."""
    options = resolved.options
    user = helper_user(resolved)
    container = {
        "name": "loader",
        "image": options.image,
        "imagePullPolicy": str(options.image_pull_policy),
        "args": ["sleep", "86400"],
        "env": environment(),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": container_security(resolved, pod_level=True, user=user),
        "volumeMounts": [{"name": "models", "mountPath": MODELS_DIR}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    # A fresh volume belongs to root: give it the loader's group so the non-root loader can write.
    security: Object = {
        **user,
        "fsGroup": user["runAsGroup"],
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    spec: Object = {
        "restartPolicy": "Never",
        "securityContext": security,
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [
            {"name": "models", "persistentVolumeClaim": {"claimName": options.resolved_pvc_name}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    }
    if resolved.options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(resolved, f"{options.name}-model-loader", "model-loader"),
        "spec": spec,
    }


def pod_disruption_budget(resolved: ResolvedDeployment) -> Object:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(resolved, resolved.options.name),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": pod_selector(resolved)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def scaling_behavior(resolved: ResolvedDeployment) -> Object:
    """Add at most two pods per two minutes (each loads its models before it helps) and remove one
    at a time after five quiet minutes."""
    return {
        "scaleUp": {"stabilizationWindowSeconds": 60, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 120}]},
        "scaleDown": {
            "stabilizationWindowSeconds": 300,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
        },
    }


def horizontal_pod_autoscaler(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(resolved, options.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": scale_target(resolved)},
            "minReplicas": options.replicas,
            "maxReplicas": options.resolved_max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(options.queue_target_us)},
                    },
                }
            ],
            "behavior": scaling_behavior(resolved),
        },
    }


# -- custom resources --------------------------------------------------------------------------------


def queue_time_query(resolved: ResolvedDeployment) -> str:
    """PromQL: the deployment's average queue time per request (µs) over the last minute."""
    namespace = resolved.options.namespace
    pods = f'pod=~"{scale_target(resolved)}-.*"' if resolved.options.kserve else f'service="{resolved.options.name}"'
    match = f'{{\n    namespace="{namespace}",\n    {pods}\n}}'
    return (
        f"sum(rate(nv_inference_queue_duration_us{match}[1m]))\n"
        f"/ clamp_min(sum(rate(nv_inference_request_success{match}[1m])), 1e-9)"
    )


def scaled_object(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(resolved, options.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": scale_target(resolved)},
            "minReplicaCount": options.replicas,
            "maxReplicaCount": options.resolved_max_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": scaling_behavior(resolved)}},
            "triggers": [
                {
                    "type": "prometheus",
                    # Value: the query is already a per-request average; AverageValue would divide it by replicas.
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": options.prometheus_url,
                        "query": queue_time_query(resolved),
                        "threshold": str(options.queue_target_us),
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }


def service_monitor(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    meta = metadata(resolved, options.name)
    meta["labels"].update(dict(options.monitor_labels))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": {**pod_selector(resolved), "app.kubernetes.io/component": "inference-server"}},
            "namespaceSelector": {"matchNames": [options.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": options.scrape_interval}],
        },
    }


def pod_monitor(resolved: ResolvedDeployment) -> Object:
    """KServe makes the Service; scrape its pods directly (port name ``metrics``)."""
    options = resolved.options
    meta = metadata(resolved, options.name)
    meta["labels"].update(dict(options.monitor_labels))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": pod_selector(resolved)},
            "namespaceSelector": {"matchNames": [options.namespace]},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": options.scrape_interval}],
        },
    }


def serving_runtime(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    spec: Object = {
        "annotations": {
            "prometheus.kserve.io/port": str(options.metrics_port),
            "prometheus.kserve.io/path": "/metrics",
        },
        "supportedModelFormats": [{"name": KSERVE_MODEL_FORMAT, "version": "1", "autoSelect": True, "priority": 1}],
        "protocolVersions": ["v2", "grpc-v2"],
        "multiModel": False,
        **pod_scheduling(resolved),
        "containers": [server_container(resolved, kserve=True)],
        "volumes": volumes(resolved),
    }
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": metadata(resolved, f"{options.name}-runtime"),
        "spec": spec,
    }


def inference_service(resolved: ResolvedDeployment) -> Object:
    options = resolved.options
    model: Object = {
        "modelFormat": {"name": KSERVE_MODEL_FORMAT, "version": "1"},
        "runtime": f"{options.name}-runtime",
        "protocolVersion": "v2",
    }
    if options.model_source is ModelSource.PVC:
        model["storageUri"] = f"pvc://{options.resolved_pvc_name}"
    autoscaled = options.autoscaler is not Autoscaler.NONE
    annotations = {
        "serving.kserve.io/deploymentMode": "RawDeployment",
        # external: the HPA or ScaledObject written here scales <name>-predictor; none: fixed replicas.
        "serving.kserve.io/autoscalerClass": "external" if autoscaled else "none",
    }
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": metadata(resolved, options.name, annotations=annotations),
        "spec": {
            "predictor": {
                "minReplicas": options.replicas,
                "maxReplicas": options.resolved_max_replicas if autoscaled else options.replicas,
                # the predictor inlines a PodSpec (KServe v0.20 pkg/apis/serving/v1beta1/predictor.go)
                "automountServiceAccountToken": False,
                "model": model,
            }
        },
    }


def adapter_rules(resolved: ResolvedDeployment) -> Object:
    """prometheus-adapter rule that serves ``triton_queue_us_per_request`` per pod to the HPA."""
    matchers = "<<.LabelMatchers>>"
    group = "<<.GroupBy>>"
    return {
        "rules": [
            {
                "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
                "metricsQuery": (
                    f"sum(rate(nv_inference_queue_duration_us{{{matchers}}}[1m])) by ({group})\n"
                    f"/ clamp_min(sum(rate(nv_inference_request_success{{{matchers}}}[1m])) by ({group}), 1e-9)"
                ),
            }
        ]
    }


# -- the set ----------------------------------------------------------------------------------------


def build_manifests(resolved: ResolvedDeployment) -> list[Manifest]:
    """Every file ``deploy`` writes besides the image context, in apply order per folder."""
    options = resolved.options
    files: list[Manifest] = []
    if options.kserve:
        files += [
            Manifest("manifests/servingruntime.yaml", serving_runtime(resolved), standard=False),
            Manifest("manifests/inferenceservice.yaml", inference_service(resolved), standard=False),
        ]
    else:
        files += [
            Manifest("manifests/deployment.yaml", deployment(resolved)),
            Manifest("manifests/service.yaml", service(resolved)),
            Manifest("manifests/service-headless.yaml", headless_service(resolved)),
        ]
    files.append(Manifest("manifests/poddisruptionbudget.yaml", pod_disruption_budget(resolved)))
    if options.monitor:
        monitor = pod_monitor(resolved) if options.kserve else service_monitor(resolved)
        files.append(Manifest(f"manifests/{monitor['kind'].lower()}.yaml", monitor, standard=False))
    if options.autoscaler is Autoscaler.HPA:
        files.append(Manifest("manifests/horizontalpodautoscaler.yaml", horizontal_pod_autoscaler(resolved)))
        files.append(
            Manifest(
                "prometheus-adapter/rules.yaml",
                adapter_rules(resolved),
                comment="Add these rules to prometheus-adapter's configuration (Helm chart value rules.custom,\n"
                "or the rules: list of its ConfigMap); they serve the HPA's metric " + QUEUE_METRIC + ".",
                kubernetes=False,
            )
        )
    elif options.autoscaler is Autoscaler.KEDA:
        files.append(Manifest("manifests/scaledobject.yaml", scaled_object(resolved), standard=False))
    if options.model_source is ModelSource.PVC:
        if options.create_pvc:
            files.append(Manifest("storage/persistentvolumeclaim.yaml", persistent_volume_claim(resolved)))
        files.append(Manifest("storage/model-loader.yaml", model_loader(resolved)))
    return files
