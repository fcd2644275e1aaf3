"""Write a deployment folder: YAML manifests, the image build context and a README of the steps.

Layout (``kubectl apply -f`` takes one folder at a time, so what is applied together sits together):

    DIR/manifests/            the server: kubectl apply -f DIR/manifests/
    DIR/storage/              the model volume and a loader pod (--model-source pvc), applied once
    DIR/prometheus-adapter/   the adapter rule the HPA's metric needs (--autoscaler hpa)
    DIR/image/                docker buildx build context
    DIR/README.md             the steps, with this deployment's names filled in

A folder is replaced only with ``--force`` and only if ``deploy`` wrote it (a marker file says so).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ge_python_backend.errors import ConfigError
from ge_python_backend.ops.access import API_KEY_HEADER, GRPC_HEADER_PREFIX
from ge_python_backend.ops.deploy.dockerfile import write_context
from ge_python_backend.ops.deploy.manifests import (
    MODELS_DIR,
    QUEUE_METRIC,
    Manifest,
    build_manifests,
    scale_target,
    server_capabilities,
)
from ge_python_backend.ops.deploy.options import Autoscaler, ModelSource
from ge_python_backend.ops.deploy.resolved import ResolvedDeployment

MARKER = ".ge-triton-deploy"
OWNED = ("manifests", "storage", "prometheus-adapter", "image", "README.md", MARKER)
YAML_WIDTH = 110


class _Dumper(yaml.SafeDumper):
    """Block style with sequences indented under their key (yamllint's default indentation rule)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


def _string(dumper: yaml.SafeDumper, text: str) -> Any:
    """Multi-line strings (PromQL) as literal blocks, as written; the rest as PyYAML chooses."""
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _string)


def to_yaml(body: Any) -> str:
    return yaml.dump(
        body, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=YAML_WIDTH, allow_unicode=True
    )


def render(manifest: Manifest, source: str) -> str:
    """One YAML document with a header comment."""
    header = [f"# Written by ge-triton deploy from {source}; regenerate it rather than edit it."]
    header += [f"# {line}" if line else "#" for line in manifest.comment.splitlines()]
    return "\n".join(header) + "\n---\n" + to_yaml(manifest.body)


@dataclass(frozen=True)
class Written:
    folder: Path
    files: tuple[Path, ...]
    manifests: tuple[Manifest, ...]


def prepare_folder(folder: Path, force: bool) -> None:
    """Make ``folder`` ready to be written: new, empty, or (with force) one deploy wrote before."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"-o {folder}: exists and is not a folder")
    if not any(folder.iterdir()):
        return
    if not (folder / MARKER).is_file():
        raise ConfigError(
            f"-o {folder}: the folder is not empty and was not written by ge-triton deploy; give a new or empty folder"
        )
    if not force:
        raise ConfigError(f"-o {folder}: holds an earlier deployment; pass --force to replace it")
    for name in OWNED:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def write_deployment(resolved: ResolvedDeployment, folder: Path, force: bool = False) -> Written:
    folder = Path(folder)
    prepare_folder(folder, force)
    folder.mkdir(parents=True, exist_ok=True)
    source = resolved.facts.path.name
    manifests = build_manifests(resolved)
    files: list[Path] = []
    for manifest in manifests:
        path = folder / manifest.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(manifest, source), encoding="utf-8")
        files.append(path)
    files += write_context(resolved, folder / "image")
    (folder / "README.md").write_text(steps(resolved, folder), encoding="utf-8")
    files.append(folder / "README.md")
    (folder / MARKER).write_text("written by ge-triton deploy; --force may replace this folder's contents\n")
    return Written(folder, tuple(files), tuple(manifests))


def summary(resolved: ResolvedDeployment) -> list[str]:
    """What was derived from the repository, one fact a line."""
    facts, options = resolved.facts, resolved.options
    lines = []
    for model in facts.models:
        devices = f", device ids {','.join(map(str, model.devices_used))}" if model.npu else ""
        lines.append(
            f"model {model.name}: engine {model.engine}, {model.instances} instance(s) x {model.streams} stream(s), "
            f"{model.versions} version(s), {model.copies} model copy(ies){devices}"
        )
    npus = f"{resolved.npus} x {options.device_type.resource}" if resolved.npus else "no NPU"
    lines.append(f"per pod: {npus}, cpu {options.cpu}, memory {options.memory}, /dev/shm {resolved.shm_size}")
    lines.append(
        f"startup budget: {resolved.startup_seconds} s ({facts.copies} model copies x "
        f"{options.startup_seconds_per_copy} s + 60 s)"
    )
    who = "root" if resolved.run_as_user == 0 else f"uid {resolved.run_as_user}, gid {resolved.run_as_group}"
    kept = server_capabilities(resolved)
    capabilities = f"no capabilities but {', '.join(kept)}" if kept else "no capabilities"
    lines.append(f"runs as {who} with {capabilities}, read-only root filesystem, no service-account token")
    if options.needs_api_key:
        restricted = [str(api) for api in options.restricted_apis]
        if not options.http_inference:
            restricted.append("HTTP inference")
        lines.append(
            f"restricted: {', '.join(restricted)} (the key in Secret {options.resolved_api_key_secret}, "
            f"header {API_KEY_HEADER}); health and metadata are open"
        )
    return lines


def steps(resolved: ResolvedDeployment, folder: Path) -> str:
    """README.md of the deployment folder: what was derived and the commands, in order."""
    options = resolved.options
    ns, name = options.namespace, options.name
    out = []
    out += [f"# Deployment {name} (namespace {ns})", "", f"Written by `ge-triton deploy {resolved.facts.path}`.", ""]
    out += [f"- {line}" for line in summary(resolved)]
    out += [f"- warning: {warning}" for warning in resolved.warnings]
    out += ["", "## 1. Build and push the image (x86_64 and aarch64)", "", "```bash"]
    out += [
        f"docker buildx build --platform linux/amd64,linux/arm64 --build-arg CANN_IMAGE={resolved.base_image} \\",
        f"    -t {options.image} --push {folder}/image",
        "```",
        "",
    ]
    step = 2
    if options.model_source is ModelSource.PVC:
        loader = f"{name}-model-loader"
        out += [f"## {step}. Put the model repository on the volume", "", "```bash"]
        out += [
            f"kubectl apply -n {ns} -f {folder}/storage/",
            f"kubectl wait -n {ns} --for=condition=Ready pod/{loader} --timeout=10m",
            f"tar -C {resolved.facts.path} -cf - . | kubectl exec -i -n {ns} {loader} -- tar -C {MODELS_DIR} -xf -",
            f"kubectl exec -n {ns} {loader} -- ge-triton check {MODELS_DIR}",
            f"kubectl delete -n {ns} pod/{loader}",
            "```",
            "",
        ]
        step += 1
    if options.autoscaler is Autoscaler.HPA:
        out += [
            f"## {step}. Give the HPA its metric",
            "",
            f"Add the rule in `{folder}/prometheus-adapter/rules.yaml` to prometheus-adapter's configuration, then",
            "check that the metric is served:",
            "",
            "```bash",
            f"kubectl get --raw '/apis/custom.metrics.k8s.io/v1beta1/namespaces/{ns}/pods/*/{QUEUE_METRIC}'",
            "```",
            "",
        ]
        step += 1
    if options.needs_api_key:
        secret = options.resolved_api_key_secret
        out += [
            f"## {step}. Create the operator key",
            "",
            "The pods need it (they do not start without it): it unlocks the restricted APIs "
            "(docs/security.md of ge-python-backend).",
            "",
            "```bash",
            f'kubectl create secret generic -n {ns} {secret} --from-literal=key="$(openssl rand -hex 16)"',
            f"KEY=$(kubectl get secret -n {ns} {secret} -o jsonpath='{{.data.key}}' | base64 -d)",
            f'curl -H "{API_KEY_HEADER}: $KEY" http://<pod or service>:{options.http_port}/v2/models/<model>/config',
            "```",
            "",
            f"gRPC clients send it as metadata `{GRPC_HEADER_PREFIX}{API_KEY_HEADER}`.",
            "",
        ]
        step += 1
    target = scale_target(resolved)
    out += [f"## {step}. Deploy and watch", "", "```bash"]
    out += [
        f"kubectl apply -n {ns} -f {folder}/manifests/",
        f"kubectl rollout status -n {ns} deployment/{target} --timeout={resolved.startup_seconds + 300}s",
        f"kubectl get pods -n {ns} -l app.kubernetes.io/instance={name}"
        if not options.kserve
        else f"kubectl get inferenceservice -n {ns} {name}",
        "```",
        "",
        "See docs/deploy.md of ge-python-backend for the metrics to watch, alerts, scaling and rollouts.",
        "",
    ]
    return "\n".join(out)
