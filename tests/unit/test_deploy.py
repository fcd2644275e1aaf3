"""ge-triton deploy: every manifest it writes validates offline, and bad options are CLI errors.

- Built-in kinds: ``kubernetes_validate`` (PyPI, bundles the Kubernetes JSON schemas) in strict
  mode against one pinned Kubernetes version, so unknown fields and wrong types fail.
- Custom resources (ServiceMonitor, PodMonitor, ScaledObject, ServingRuntime, InferenceService):
  the structure their CRDs require, checked by hand (the CRDs are not vendored); the pod fields a
  ServingRuntime inlines are validated as a core Pod.
- Every YAML file: ``yamllint`` (run as a program, it is GPL) with the project's .yamllint.yaml.
- The objects agree with each other: selectors match labels, named ports and volumes exist.
- Hardening: no root but where NPUs need it, every capability dropped, no
  service-account token, a read-only root filesystem with emptyDirs where the server writes, and
  the operator APIs restricted by a key from a Secret.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ge_python_backend.cli import main
from ge_python_backend.ops.access import API_KEY_ENV, API_KEY_HEADER, HTTP_INFERENCE_OFF_HEADER, OPERATOR_APIS
from ge_python_backend.ops.deploy.dockerfile import PREPARE, package_pyproject
from ge_python_backend.ops.deploy.manifests import QUEUE_METRIC
from ge_python_backend.repository.config import set_parameters
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models

#: The Kubernetes version every built-in object is validated against (bundled by kubernetes-validate).
KUBERNETES = "1.30"
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "registry.example.com/ml/ge-triton:0.1.0"
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "ScaledObject", "ServingRuntime", "InferenceService"}


# -- repositories -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    """cpu: onnxruntime on the CPU; sim: acl-sim with 2 streams; npu: onnxruntime on ORT's CANN
    provider (needs an NPU) with 2 instances over device ids 0,1; host_ids: device id 4."""
    root = tmp_path_factory.mktemp("deploy_repos")
    onnx = models.linear(root / "src" / "linear.onnx")
    sim_om = root / "src" / "linear.om"
    sim_compile(onnx, sim_om, batch_gears=(1, 2, 4, 8))
    made = {}
    made["cpu"] = root / "cpu"
    generate(onnx, made["cpu"], GenerateOptions(name="linear"))
    made["sim"] = root / "sim"
    generate(sim_om, made["sim"], GenerateOptions(name="linear_sim", streams=2, instance_count=2))
    generate(onnx, made["sim"], GenerateOptions(name="linear"))
    for key, ids in (("npu", (0, 1)), ("host_ids", (4,))):
        made[key] = root / key
        model = generate(
            onnx, made[key], GenerateOptions(name="linear_npu", instance_count=len(ids), device_ids=ids)
        ).model_dir
        set_parameters(model / "config.pbtxt", onnxruntime_providers="CANNExecutionProvider,CPUExecutionProvider")
    made["empty"] = root / "empty"
    made["empty"].mkdir()
    made["broken"] = root / "broken"
    generate(onnx, made["broken"], GenerateOptions(name="linear"))
    (made["broken"] / "linear" / "1" / "model.onnx").unlink()
    return made


def run_deploy(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(["deploy", *args])
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read_documents(folder: Path) -> dict[str, Any]:
    """Relative path -> the one YAML document of every .yaml file under ``folder``."""
    documents = {}
    for path in sorted(folder.rglob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1, f"{path}: expected one document, found {len(docs)}"
        documents[path.relative_to(folder).as_posix()] = docs[0]
    return documents


# -- custom resources: the structure their CRDs require ----------------------------------------------

_DURATION = re.compile(r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")


def _metadata(doc: dict) -> None:
    assert isinstance(doc["metadata"]["name"], str) and doc["metadata"]["name"]
    assert isinstance(doc["metadata"]["namespace"], str)


def check_service_monitor(doc: dict) -> None:
    # monitoring.coreos.com_servicemonitors.yaml (operator 0.93): spec requires endpoints and selector.
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    spec = doc["spec"]
    assert isinstance(spec["selector"]["matchLabels"], dict) and spec["selector"]["matchLabels"]
    assert spec["endpoints"], "endpoints"
    for endpoint in spec["endpoints"]:
        assert isinstance(endpoint["port"], str)
        assert _DURATION.match(endpoint["interval"])


def check_pod_monitor(doc: dict) -> None:
    # monitoring.coreos.com_podmonitors.yaml: spec requires selector; endpoints name a pod port.
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["spec"]["selector"]["matchLabels"]
    for endpoint in doc["spec"]["podMetricsEndpoints"]:
        assert isinstance(endpoint["port"], str)
        assert _DURATION.match(endpoint["interval"])


def check_scaled_object(doc: dict) -> None:
    # keda.sh_scaledobjects.yaml (KEDA 2.20): spec requires scaleTargetRef (name) and triggers
    # (type, metadata: a map of strings); the prometheus scaler needs serverAddress, query, threshold.
    assert doc["apiVersion"] == "keda.sh/v1alpha1"
    spec = doc["spec"]
    assert isinstance(spec["scaleTargetRef"]["name"], str)
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    for trigger in spec["triggers"]:
        assert trigger["type"] == "prometheus"
        assert trigger.get("metricType", "AverageValue") in ("AverageValue", "Value", "Utilization")
        metadata = trigger["metadata"]
        assert all(isinstance(value, str) for value in metadata.values()), metadata
        assert {"serverAddress", "query", "threshold"} <= set(metadata)
        float(metadata["threshold"])


def check_serving_runtime(doc: dict) -> None:
    # servingruntime_types.go (KServe 0.20): containers required; model formats have a name;
    # protocol versions from v1, v2, grpc-v1, grpc-v2. The inlined pod fields validate as a Pod.
    assert doc["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = doc["spec"]
    assert spec["containers"][0]["name"] == "kserve-container"
    assert all(f["name"] for f in spec["supportedModelFormats"])
    assert set(spec["protocolVersions"]) <= {"v1", "v2", "grpc-v1", "grpc-v2"}
    pod_fields = ("containers", "volumes", "nodeSelector", "affinity", "tolerations", "imagePullSecrets")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "servingruntime-pod-fields"},
        "spec": {key: spec[key] for key in pod_fields if key in spec},
    }
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)


def check_inference_service(doc: dict) -> None:
    # predictor_model.go: model.modelFormat.name is required; storageUri names the claim.
    assert doc["apiVersion"] == "serving.kserve.io/v1beta1"
    predictor = doc["spec"]["predictor"]
    assert predictor["model"]["modelFormat"]["name"]
    assert 1 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    uri = predictor["model"].get("storageUri")
    assert uri is None or uri.startswith("pvc://")
    annotations = doc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] in ("RawDeployment", "Standard")
    assert annotations["serving.kserve.io/autoscalerClass"] in ("hpa", "external", "none", "keda")


CUSTOM_CHECKS = {
    "ServiceMonitor": check_service_monitor,
    "PodMonitor": check_pod_monitor,
    "ScaledObject": check_scaled_object,
    "ServingRuntime": check_serving_runtime,
    "InferenceService": check_inference_service,
}


def validate_folder(folder: Path) -> dict[str, Any]:
    """Validate every manifest under ``folder`` and lint every YAML file; returns the documents by path."""
    documents = read_documents(folder)
    for path, doc in documents.items():
        if path.startswith("prometheus-adapter/"):
            continue
        _metadata(doc)
        if doc["kind"] in CUSTOM_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, KUBERNETES, strict=True)
            CUSTOM_CHECKS[doc["kind"]](doc)
        else:
            assert kubernetes_validate.validate(doc, KUBERNETES, strict=True) == KUBERNETES, path
    lint = subprocess.run(
        [
            sys.executable,
            "-m",
            "yamllint",
            "--strict",
            "-c",
            str(ROOT / ".yamllint.yaml"),
            "-f",
            "parsable",
            str(folder),
        ],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    return documents


def by_kind(documents: dict[str, Any]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for doc in documents.values():
        kinds.setdefault(doc.get("kind", "config"), []).append(doc)
    return kinds


def pod_spec(kinds: dict[str, list[dict]]) -> dict:
    if "Deployment" in kinds:
        return kinds["Deployment"][0]["spec"]["template"]["spec"]
    return kinds["ServingRuntime"][0]["spec"]


def check_consistency(kinds: dict[str, list[dict]]) -> None:
    """Names that point at each other resolve: ports, volumes, selectors, targets."""
    spec = pod_spec(kinds)
    volumes = {v["name"] for v in spec["volumes"]}
    for container in spec["containers"] + spec.get("initContainers", []):
        assert {m["name"] for m in container.get("volumeMounts", [])} <= volumes
    server = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert server[probe]["httpGet"]["port"] in ports
    # serve's own health on its metrics port: tritonserver's health and the models' (ops/front.py)
    assert {server[probe]["httpGet"]["port"] for probe in ("startupProbe", "livenessProbe", "readinessProbe")} == {
        "metrics"
    }
    assert server["startupProbe"]["httpGet"]["path"] == "/health/live"
    assert server["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert server["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    args = server["args"]
    assert args[:2] == ["ge-triton", "serve"]
    assert f"--http-port={ports['http']}" in args and f"--grpc-port={ports['grpc']}" in args
    assert f"--metrics-port={ports['metrics']}" in args
    if "Deployment" in kinds:
        deployment = kinds["Deployment"][0]
        template_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
        for svc in kinds["Service"]:
            assert svc["spec"]["selector"].items() <= template_labels.items()
            assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports)
        for monitor in kinds.get("ServiceMonitor", []):
            selected = [
                s
                for s in kinds["Service"]
                if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
            ]
            assert len(selected) == 1 and "metrics" in {p["name"] for p in selected[0]["spec"]["ports"]}
        for claim in kinds.get("PersistentVolumeClaim", []):
            used = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
            assert used and used[0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    else:
        service = kinds["InferenceService"][0]
        assert service["spec"]["predictor"]["model"]["runtime"] == kinds["ServingRuntime"][0]["metadata"]["name"]
    target = (
        kinds["Deployment"][0]["metadata"]["name"]
        if "Deployment" in kinds
        else f"{kinds['InferenceService'][0]['metadata']['name']}-predictor"
    )
    for hpa in kinds.get("HorizontalPodAutoscaler", []):
        assert hpa["spec"]["scaleTargetRef"]["name"] == target
        assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == QUEUE_METRIC
    for scaled in kinds.get("ScaledObject", []):
        assert scaled["spec"]["scaleTargetRef"]["name"] == target


# -- hardening ----------------------------------------------------------------------------------------

SERVER_CONTAINERS = {"tritonserver", "kserve-container"}


def pods(kinds: dict[str, list[dict]]) -> list[tuple[dict, dict]]:
    """(pod fields, the object that sets automountServiceAccountToken) of every pod written."""
    found = [(d["spec"]["template"]["spec"],) * 2 for d in kinds.get("Deployment", [])]
    found += [(d["spec"],) * 2 for d in kinds.get("Pod", [])]
    for runtime, service in zip(kinds.get("ServingRuntime", []), kinds.get("InferenceService", [])):
        found.append((runtime["spec"], service["spec"]["predictor"]))  # KServe merges the two into the pod
    return found


def check_hardening(kinds: dict[str, list[dict]]) -> None:
    """No service-account token; every container drops ALL capabilities (a root server with NPUs may
    add DAC_OVERRIDE only), cannot escalate, runs on a read-only root filesystem and writes only to
    emptyDirs (HOME, working directory; the server also /dev/shm and CANN's log folder); nothing but
    the server runs as root; the server's restricted APIs take the key from a Secret."""
    for spec, token_holder in pods(kinds):
        assert token_holder["automountServiceAccountToken"] is False
        empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        pod_context = spec.get("securityContext", {})
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["capabilities"]["drop"] == ["ALL"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
            assert context["privileged"] is False
            user = context.get("runAsUser", pod_context.get("runAsUser"))
            server = container["name"] in SERVER_CONTAINERS
            if not server:
                assert user != 0 and context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True
                assert "add" not in context["capabilities"]
            elif user != 0:
                assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True
            assert set(context["capabilities"].get("add", [])) <= {"DAC_OVERRIDE"}
            writable = [
                m["mountPath"]
                for m in container.get("volumeMounts", [])
                if m["name"] in empty_dirs and not m.get("readOnly")
            ]
            env = {e["name"]: e for e in container.get("env", [])}
            written = [env["HOME"]["value"], container.get("workingDir", env["HOME"]["value"])]
            if server:
                written += ["/dev/shm", env["ASCEND_PROCESS_LOG_PATH"]["value"]]
            for path in written:
                assert any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable), (path, writable)
            if server and any("$(" + API_KEY_ENV + ")" in a for a in container["args"]):
                reference = env[API_KEY_ENV]["valueFrom"]["secretKeyRef"]
                assert reference["key"] == "key" and not reference.get("optional", False)


# -- the option matrix --------------------------------------------------------------------------------

MATRIX = {
    "cpu-defaults": ("cpu", []),
    "sim-keda-image": ("sim", ["--autoscaler", "keda", "--model-source", "image"]),
    "npu-310P": ("npu", ["--device-type", "Ascend310P", "--name", "resnet", "--namespace", "ml"]),
    "npu-910-kserve": ("npu", ["--device-type", "Ascend910", "--kserve", "--pvc", "models"]),
    "npu-kserve-keda-image": (
        "npu",
        [
            "--device-type",
            "npu",
            "--base-image",
            "quay.io/ascend/cann:9.0.1-950-ubuntu22.04-py3.11",
            "--kserve",
            "--autoscaler",
            "keda",
            "--model-source",
            "image",
            "--run-as-user",
            "1000",
            "--device-group",
            "1001",
        ],
    ),
    "npu-310-options": (
        "npu",
        [
            "--device-type",
            "Ascend310",
            "--base-image",
            "registry.example.com/cann/310:8.0",
            "--autoscaler",
            "none",
            "--no-monitor",
            "--no-create-pvc",
            "--driver-mounts",
            "hostpath",
            "--spread",
            "required",
            "--rollout",
            "replace",
            "--model-control-mode",
            "explicit",
            "--node-selector",
            "none",
            "--no-device-toleration",
            "--replicas",
            "3",
            "--cpu-limit",
            "4",
            "--memory",
            "6Gi",
            "--memory-limit",
            "12Gi",
            "--image-pull-secret",
            "regcred",
            "--image-pull-policy",
            "Always",
        ],
    ),
    "longest-names": (
        "cpu",
        [
            "--name",
            "a" * 40,
            "--namespace",
            "n" * 63,
            "--kserve",
            "--autoscaler",
            "keda",
            "--monitor-label",
            "release=kube-prometheus-stack",
            "--storage-class",
            "fast.example.com",
        ],
    ),
}


@pytest.mark.parametrize("case", MATRIX)
def test_every_manifest_validates(repos, tmp_path, capsys, case):
    repo, extra = MATRIX[case]
    out = tmp_path / "out"
    code, stdout, stderr = run_deploy([str(repos[repo]), "-o", str(out), "--image", IMAGE, *extra], capsys)
    assert code == 0, stderr
    documents = validate_folder(out)
    kinds = by_kind(documents)
    check_consistency(kinds)
    check_hardening(kinds)
    assert "PodDisruptionBudget" in kinds
    assert ("ServingRuntime" in kinds) == ("--kserve" in extra)
    assert (out / "image" / "Dockerfile").is_file() and (out / "README.md").is_file()
    assert "wrote" in stdout


def deployed(repos, tmp_path, capsys, repo: str, *extra: str) -> dict[str, list[dict]]:
    out = tmp_path / "out"
    code, _, stderr = run_deploy([str(repos[repo]), "-o", str(out), "--image", IMAGE, *extra], capsys)
    assert code == 0, stderr
    return by_kind(read_documents(out))


def test_npu_pods_request_the_device_plugin_resource(repos, tmp_path, capsys):
    kinds = deployed(repos, tmp_path, capsys, "npu")
    spec = pod_spec(kinds)
    resources = spec["containers"][0]["resources"]
    # Two instances over device_ids 0,1: two chips, limits equal to requests, on the plugin's nodes.
    assert resources["requests"]["huawei.com/Ascend310P"] == 2 == resources["limits"]["huawei.com/Ascend310P"]
    assert spec["nodeSelector"] == {"accelerator": "huawei-Ascend310P"}
    assert spec["tolerations"] == [{"key": "huawei.com/Ascend310P", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["securityContext"]["runAsUser"] == 0  # device nodes: root unless --device-group
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}
    check = spec["initContainers"][0]
    assert "huawei.com/Ascend310P" not in check["resources"]["requests"]
    assert check["securityContext"]["runAsUser"] == 1000 and check["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    assert "replicas" not in kinds["Deployment"][0]["spec"]  # the HPA owns the count


def test_cpu_pods_request_no_npu_and_run_as_non_root(repos, tmp_path, capsys):
    kinds = deployed(repos, tmp_path, capsys, "cpu")
    spec = pod_spec(kinds)
    container = spec["containers"][0]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert "nodeSelector" not in spec and "tolerations" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # The non-root loader can write into a fresh (root-owned) volume through fsGroup.
    (loader,) = kinds["Pod"]
    assert loader["spec"]["securityContext"]["fsGroup"] == 1000


def test_startup_budget_and_shared_memory_come_from_the_model_copies(repos, tmp_path, capsys):
    spec = pod_spec(deployed(repos, tmp_path, capsys, "sim", "--startup-seconds-per-copy", "45"))
    # linear_sim: 2 instances x 2 streams (acl-sim loads a copy per stream) + linear: 1 -> 5 copies.
    server = spec["containers"][0]
    assert server["startupProbe"]["failureThreshold"] == math.ceil((60 + 45 * 5) / 10)
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm["medium"] == "Memory" and shm["sizeLimit"] == "256Mi"
    assert "--server-arg=--backend-config=python,shm-default-byte-size=16777216" in server["args"]


def test_explicit_control_mode_by_default_loads_each_model_and_lets_serve_reload_it(repos, tmp_path, capsys):
    args = pod_spec(deployed(repos, tmp_path, capsys, "sim"))["containers"][0]["args"]
    assert "--model-control-mode=explicit" in args
    assert {a for a in args if a.startswith("--load-model=")} == {"--load-model=linear", "--load-model=linear_sim"}
    args = pod_spec(deployed(repos, tmp_path / "none", capsys, "sim", "--model-control-mode", "none"))["containers"][0][
        "args"
    ]
    assert "--model-control-mode=none" in args and not [a for a in args if a.startswith("--load-model")]


def test_non_root_with_npus_uses_the_device_group(repos, tmp_path, capsys):
    kinds = deployed(repos, tmp_path, capsys, "npu", "--run-as-user", "1000", "--device-group", "1001", "--kserve")
    context = kinds["ServingRuntime"][0]["spec"]["containers"][0]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (1000, 1001, True)
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_the_capabilities_the_server_keeps_can_be_chosen(repos, tmp_path, capsys):
    spec = pod_spec(deployed(repos, tmp_path, capsys, "npu", "--capabilities", "cap_dac_override,IPC_LOCK"))
    assert spec["containers"][0]["securityContext"]["capabilities"]["add"] == ["DAC_OVERRIDE", "IPC_LOCK"]
    spec = pod_spec(deployed(repos, tmp_path / "none", capsys, "npu", "--capabilities", "none"))
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_operator_apis_and_http_inference_are_restricted_with_the_key_from_a_secret(repos, tmp_path, capsys):
    """Findings: deploy left HTTP inference (the 2.51 crash) and the repository
    API open. What the restrictions do in a running server: tests/e2e/test_deploy_image.py."""
    out = tmp_path / "out"
    code, stdout, _ = run_deploy([str(repos["cpu"]), "-o", str(out), "--image", IMAGE, "--name", "clf"], capsys)
    assert code == 0
    server = pod_spec(by_kind(read_documents(out)))["containers"][0]
    key, groups = f"$({API_KEY_ENV})", ",".join(OPERATOR_APIS)
    assert f"--server-arg=--http-restricted-api={groups}:{API_KEY_HEADER}={key}" in server["args"]
    assert f"--server-arg=--grpc-restricted-protocol={groups}:{API_KEY_HEADER}={key}" in server["args"]
    assert f"--server-arg=--http-restricted-api=inference:{HTTP_INFERENCE_OFF_HEADER}={key}" in server["args"]
    # serve adds no restriction of its own: it reads these back for its own repository calls
    assert {"--restricted-apis=none", "--http-inference=on"} <= set(server["args"])
    (variable,) = [e for e in server["env"] if e["name"] == API_KEY_ENV]
    assert variable["valueFrom"]["secretKeyRef"] == {"name": "clf-api-key", "key": "key"}
    assert "kubectl create secret generic -n default clf-api-key" in (out / "README.md").read_text()
    assert "restricted: model-repository, model-config, shared-memory, trace, logging, HTTP inference" in stdout


def test_opening_the_apis_is_explicit_and_warned_about(repos, tmp_path, capsys):
    opened = ["--restricted-apis", "none", "--http-inference", "on", "--model-control-mode", "explicit"]
    out = tmp_path / "out"
    code, _, err = run_deploy([str(repos["cpu"]), "-o", str(out), "--image", IMAGE, *opened], capsys)
    assert code == 0
    server = pod_spec(by_kind(read_documents(out)))["containers"][0]
    assert not [a for a in server["args"] if a.startswith(("--server-arg=--http-restricted", "--server-arg=--grpc-re"))]
    assert API_KEY_ENV not in {e["name"] for e in server["env"]}
    assert "model-repository API open (--restricted-apis): any client that reaches a pod can load models" in err
    assert "--http-inference on: tritonserver 2.51 aborts on one small HTTP JSON request" in err
    assert "create secret" not in (out / "README.md").read_text()


def test_kserve_and_keda_target_the_predictor(repos, tmp_path, capsys):
    kinds = deployed(repos, tmp_path, capsys, "npu", "--kserve", "--autoscaler", "keda", "--name", "clf")
    trigger = kinds["ScaledObject"][0]["spec"]["triggers"][0]
    assert trigger["metricType"] == "Value" and trigger["metadata"]["threshold"] == "10000"
    assert 'pod=~"clf-predictor-.*"' in trigger["metadata"]["query"]
    assert kinds["InferenceService"][0]["spec"]["predictor"]["model"]["storageUri"] == "pvc://clf-models"
    runtime = kinds["ServingRuntime"][0]["spec"]["containers"][0]
    assert runtime["args"][2] == "/mnt/models" and "--http-port=8080" in runtime["args"]
    assert kinds["PodMonitor"][0]["spec"]["selector"]["matchLabels"] == {"serving.kserve.io/inferenceservice": "clf"}


def test_the_adapter_rule_serves_the_hpas_metric(repos, tmp_path, capsys):
    kinds = deployed(repos, tmp_path, capsys, "cpu")
    (rule,) = kinds["config"][0]["rules"]
    assert rule["name"]["as"] == QUEUE_METRIC
    assert "nv_inference_queue_duration_us" in rule["metricsQuery"]
    assert "nv_inference_request_success" in rule["metricsQuery"]
    target = kinds["HorizontalPodAutoscaler"][0]["spec"]["metrics"][0]["pods"]["target"]
    assert target == {"type": "AverageValue", "averageValue": "10000"}


def test_strict_validation_catches_unknown_fields(repos, tmp_path, capsys):
    """The validator really is strict: an unknown field and a wrong type fail."""
    deployment = deployed(repos, tmp_path, capsys, "cpu")["Deployment"][0]
    deployment["spec"]["template"]["spec"]["containers"][0]["bogusField"] = 1
    with pytest.raises(kubernetes_validate.ValidationError, match="bogusField"):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)


def test_image_context(repos, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run_deploy([str(repos["sim"]), "-o", str(out), "--image", IMAGE, "--model-source", "image"], capsys)
    assert code == 0, err
    dockerfile = (out / "image" / "Dockerfile").read_text()
    assert "ARG CANN_IMAGE=quay.io/ascend/cann:8.3.rc2-310p-ubuntu22.04-py3.11" in dockerfile
    assert "FROM ${CANN_IMAGE}" in dockerfile and "COPY model_repository /models" in dockerfile
    # Nothing architecture-specific, and nothing the device plugin sets per pod.
    assert not re.search(r"x86_64|aarch64|amd64|arm64", dockerfile.split("FROM")[1])
    assert "ASCEND_VISIBLE_DEVICES" not in dockerfile
    assert (out / "image" / "model_repository" / "linear_sim" / "config.pbtxt").is_file()
    assert (out / "image" / "ge-python-backend" / "ge_python_backend" / "ops" / "deploy" / "options.py").is_file()
    assert not list((out / "image").rglob("__pycache__"))
    compile(PREPARE, "prepare.py", "exec")
    pyproject = package_pyproject()
    assert '"numpy>=1.22"' in pyproject and '"onnxruntime>=1.16"' in pyproject and "pytest" not in pyproject
    assert 'acl-sim = "ge_python_backend.sim.plugin:ENGINE"' in pyproject
    assert '"repository/model_templates/generic/template.json"' in pyproject and '"py.typed"' in pyproject


def test_force_replaces_only_an_earlier_deployment(repos, tmp_path, capsys):
    out = tmp_path / "out"
    base = [str(repos["cpu"]), "-o", str(out), "--image", IMAGE]
    assert run_deploy(base, capsys)[0] == 0
    code, _, err = run_deploy(base, capsys)
    assert code == 2 and "pass --force to replace it" in err
    (out / "notes.txt").write_text("mine")
    assert run_deploy([*base, "--force", "--kserve"], capsys)[0] == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "manifests" / "deployment.yaml").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x").write_text("")
    code, _, err = run_deploy([str(repos["cpu"]), "-o", str(foreign), "--image", IMAGE, "--force"], capsys)
    assert code == 2 and "was not written by ge-triton deploy" in err


def test_idle_npus_and_npus_without_npu_models_are_warned_about(repos, tmp_path, capsys):
    code, _, err = run_deploy([str(repos["npu"]), "-o", str(tmp_path / "a"), "--image", IMAGE, "--npus", "3"], capsys)
    assert code == 0 and "device ids 2 are used by no model instance" in err
    code, _, err = run_deploy([str(repos["cpu"]), "-o", str(tmp_path / "b"), "--image", IMAGE, "--npus", "1"], capsys)
    assert code == 0 and "no model needs an NPU" in err


def test_a_model_compiled_at_load_is_warned_about(tmp_path, capsys):
    """An .onnx under engine acl is compiled by ATC in every pod at start: deploy says so and what to do."""
    onnx = models.linear(tmp_path / "src" / "linear.onnx")
    generate(onnx, tmp_path / "repo", GenerateOptions(name="linear_atc", engine="acl"))
    code, _, err = run_deploy([str(tmp_path / "repo"), "-o", str(tmp_path / "out"), "--image", IMAGE], capsys)
    assert code == 0, err
    assert "model(s) linear_atc hold an .onnx or .pb that every pod compiles with ATC when it starts" in err
    assert "atc_cache_dir" in err and "ge-triton atc-cmd" in err


def test_a_ge_backend_folder_laid_out_as_cannes_example_deploys_as_check_and_serve_read_it(tmp_path, capsys):
    """CANN's GE backend example keeps its model as 1/<name>.onnx, named by default_model_filename;
    check passes it, serve serves it (tests/e2e/test_load_refusals.py, taken_npu_ge_layout), and
    deploy reads its parameters as the load does (translated), finding the same model file."""
    folder = tmp_path / "repo" / "resnet"
    models.linear(folder / "1" / "my.onnx")
    (folder / "config.pbtxt").write_text(
        'name: "resnet"\nbackend: "npu_ge"\nmax_batch_size: 8\ndefault_model_filename: "my.onnx"\n'
        'parameters [{key: "device_ids" value {string_value: "0"}}, {key: "ge.aicoreNum" value {string_value: "8|"}}]\n'
    )
    for argv in ([], ["--no-check-repository"]):
        code, _, err = run_deploy(
            [str(tmp_path / "repo"), "-o", str(tmp_path / f"out{len(argv)}"), "--image", IMAGE, *argv], capsys
        )
        assert code == 0, err
        assert "model(s) resnet hold an .onnx or .pb that every pod compiles with ATC when it starts" in err


# -- errors: one line on stderr, exit 2 ------------------------------------------------------------------

ERRORS = [
    (["{cpu}", "--replicas", "0"], "--replicas 0: expected an integer from 1 to 1000"),
    (["{cpu}", "--device-type", "Ascend999"], "--device-type 'Ascend999': expected one of Ascend310P, Ascend310,"),
    (["{missing}"], "is not a folder"),
    (["{empty}"], "holds no model folder"),
    (["{model_folder}"], "is a model folder (it holds config.pbtxt)"),
    (["{broken}"], "has errors every pod would hit"),
    (["{host_ids}"], "has device_ids 4 (config.pbtxt parameter device_ids/device_id), but a pod with 1 NPU"),
    (["{npu}", "--npus", "1"], "has device_ids 0,1"),
    (["{npu}", "--npus", "0"], "--npus 0, but model 'linear_npu' runs on engine onnxruntime, which needs"),
    (["{cpu}", "--replicas", "3", "--max-replicas", "2"], "--max-replicas 2: expected an integer from 3 to 1000"),
    (["{cpu}", "--memory", "lots"], "--memory 'lots': expected a Kubernetes quantity"),
    (["{cpu}", "--memory-limit", "1Gi"], "--memory-limit 1Gi: expected at least --memory 8Gi"),
    (["{cpu}", "--shm-size", "8Gi"], "--shm-size 8192Mi does not fit in --memory-limit 8Gi"),
    (["{npu}", "--run-as-user", "1000"], "--run-as-user 1000 with NPUs needs --device-group GID"),
    (["{cpu}", "--restricted-apis", "config"], "'config' is not a tritonserver API group; expected 'none' or"),
    (["{npu}", "--capabilities", "SYS_EVERYTHING"], "'SYS_EVERYTHING' is not a Linux capability"),
    (["{cpu}", "--api-key-secret", "Key"], "--api-key-secret 'Key': expected a Kubernetes object name"),
    (["{cpu}", "--pvc-access-mode", "ReadWriteOnce"], "--pvc-access-mode ReadWriteOnce with up to 4 replicas"),
    (["{npu}", "--device-type", "Ascend310"], "--device-type Ascend310: there is no official CANN image"),
    (["{cpu}", "--name", "My_Model"], "--name 'My_Model': expected a DNS label of at most 40 characters"),
    (["{cpu}", "--image", "registry.example.com/ge-triton"], "--image 'registry.example.com/ge-triton': expected"),
    (["{cpu}", "--grpc-port", "8000"], "expected three different ports"),
    (["{cpu}", "--autoscaler", "vpa"], "--autoscaler 'vpa': expected one of hpa, keda, none"),
    (["{cpu}", "--node-selector", "accelerator"], "--node-selector 'accelerator': expected KEY=VALUE"),
    (["{cpu}", "--monitor-label", "release=a b"], "--monitor-label release=a b: expected a Kubernetes label"),
    (["{cpu}", "--prometheus-url", "prometheus:9090"], "--prometheus-url 'prometheus:9090': expected an http"),
    (["{cpu}", "--scrape-interval", "15"], "--scrape-interval '15': expected a duration"),
    (["{cpu}", "--cpu-limit", "1"], "--cpu-limit 1: expected at least --cpu 2"),
    (["{cpu}", "--startup-seconds-per-copy", "0"], "--startup-seconds-per-copy 0: expected an integer from 1"),
    (["{cpu}", "--queue-target-us", "500"], "--queue-target-us 500 is not above model 'linear'"),
]


@pytest.mark.parametrize("argv, fragment", ERRORS, ids=[" ".join(a[1:]) or a[0] for a, _ in ERRORS])
def test_bad_options_are_one_line_errors(repos, tmp_path, capsys, argv, fragment):
    paths = {key: str(path) for key, path in repos.items()}
    paths.update(missing=str(tmp_path / "missing"), model_folder=str(repos["cpu"] / "linear"))
    args = [a.format(**paths) for a in argv]
    if "--image" not in args:
        args += ["--image", IMAGE]
    code, out, err = run_deploy([*args, "-o", str(tmp_path / "out")], capsys)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ge-triton deploy: error: "), err
    assert fragment in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_image_is_required(repos, tmp_path, capsys):
    code, _, err = run_deploy([str(repos["cpu"]), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and "the following arguments are required: --image" in err
