"""``ge-triton deploy REPO -o DIR``: Kubernetes manifests and an image build context for serving
a model repository with tritonserver on Ascend nodes (ge_python_backend.ops.deploy)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ge_python_backend.ops.access import API_KEY_HEADER, OPERATOR_APIS, parse_apis
from ge_python_backend.ops.deploy import (
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
    deploy,
    summary,
)
from ge_python_backend.ops.deploy.options import choice, pairs

EPILOG = """writes:
  DIR/manifests/           Deployment, Service (+ headless), PodDisruptionBudget, ServiceMonitor, HPA or
                           ScaledObject; with --kserve: ServingRuntime, InferenceService, PodMonitor
  DIR/storage/             PersistentVolumeClaim and a loader pod (--model-source pvc)
  DIR/prometheus-adapter/  the rule that serves the HPA's queue-time metric (--autoscaler hpa)
  DIR/image/               Dockerfile and build context (CANN base image, tritonserver, ge_python_backend)
  DIR/README.md            the commands to build, load the models, deploy and watch, with these names

The repository is checked first (ge-triton check): a repository with errors is refused. NPUs, the
startup budget and /dev/shm are sized from its models; device_ids must lie in 0..NPUS-1, the logical
ids a pod sees. See docs/deploy.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("repository", type=Path, help="model repository folder (from ge-triton generate)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="folder to write")
    parser.add_argument("--force", action="store_true", help="replace DIR if an earlier deploy wrote it")
    names = parser.add_argument_group("names")
    names.add_argument(
        "--image", metavar="IMAGE", required=True, help="the image to build from DIR/image and run (with a tag)"
    )
    names.add_argument("--name", metavar="NAME", default="ge-triton", help="name of the objects (default: ge-triton)")
    names.add_argument("--namespace", metavar="NAMESPACE", default="default", help="namespace (default: default)")
    names.add_argument(
        "--base-image", metavar="IMAGE", help="CANN base image (default: quay.io/ascend/cann for the device type)"
    )
    names.add_argument(
        "--image-pull-policy", metavar="POLICY", default="IfNotPresent", help="IfNotPresent, Always or Never"
    )
    names.add_argument("--image-pull-secret", dest="image_pull_secrets", action="append", default=[], metavar="NAME")
    device = parser.add_argument_group("devices and scheduling")
    device.add_argument(
        "--device-type",
        metavar="TYPE",
        default="Ascend310P",
        help="Ascend310P, Ascend310, Ascend910 or npu (huawei.com/<type>)",
    )
    device.add_argument(
        "--npus", metavar="N", type=int, help="NPUs per pod (default: the device ids the models use; 0 without)"
    )
    device.add_argument(
        "--node-selector",
        action="append",
        metavar="KEY=VALUE",
        help="node label to require (repeatable; default with NPUs: accelerator=huawei-<type>; 'none': no selector)",
    )
    device.add_argument(
        "--no-device-toleration",
        dest="device_toleration",
        action="store_false",
        help="do not tolerate the huawei.com/<type>:NoSchedule taint",
    )
    device.add_argument(
        "--driver-mounts",
        metavar="HOW",
        default="runtime",
        help="runtime: Ascend Docker Runtime mounts the driver (default); hostpath: mount it from the host",
    )
    device.add_argument("--run-as-user", metavar="UID", type=int, help="UID (default: 0 with NPUs, 1000 without)")
    device.add_argument("--device-group", type=int, metavar="GID", help="group owning /dev/davinci* (for non-root)")
    device.add_argument(
        "--capabilities",
        metavar="NAMES",
        help="Linux capabilities the server keeps, comma-separated, or 'none' (default: DAC_OVERRIDE for root with "
        "NPUs, for the device nodes; none otherwise); all others are dropped",
    )
    device.add_argument(
        "--spread", metavar="HOW", default="preferred", help="pod anti-affinity per node: preferred or required"
    )
    device.add_argument(
        "--rollout", metavar="HOW", default="surge", help="surge (new pod first) or replace (old pod first)"
    )
    scale = parser.add_argument_group("replicas and autoscaling")
    scale.add_argument(
        "--replicas", metavar="N", type=int, default=2, help="replicas (the autoscaler's minimum; default 2)"
    )
    scale.add_argument(
        "--max-replicas", metavar="N", type=int, help="the autoscaler's maximum (default: twice --replicas)"
    )
    scale.add_argument("--autoscaler", metavar="KIND", default="hpa", help="hpa (prometheus-adapter), keda or none")
    scale.add_argument(
        "--queue-target-us",
        metavar="US",
        type=int,
        default=10_000,
        help="target average queue time per request, µs (10000)",
    )
    scale.add_argument(
        "--prometheus-url", metavar="URL", default="http://prometheus-operated.monitoring.svc:9090", help="for KEDA"
    )
    scale.add_argument("--kserve", action="store_true", help="a KServe ServingRuntime and InferenceService instead")
    server = parser.add_argument_group("server")
    server.add_argument("--http-port", metavar="PORT", type=int, default=8000)
    server.add_argument("--grpc-port", metavar="PORT", type=int, default=8001)
    server.add_argument("--metrics-port", metavar="PORT", type=int, default=8002)
    server.add_argument(
        "--model-control-mode",
        metavar="MODE",
        default="explicit",
        help="explicit (default: the repository's models loaded at start, and serve reloads one that breaks) or "
        "none (no in-pod recovery: a broken model fails the liveness probe and the container restarts)",
    )
    access = parser.add_argument_group("access (docs/security.md)")
    access.add_argument(
        "--restricted-apis",
        metavar="GROUPS",
        default=",".join(OPERATOR_APIS),
        help=f"tritonserver API groups that need the operator key (header {API_KEY_HEADER}, HTTP and gRPC), "
        "comma-separated, or 'none' (default: " + ",".join(OPERATOR_APIS) + ")",
    )
    access.add_argument(
        "--http-inference",
        choices=("on", "off"),
        default="off",
        help="HTTP inference (default off: tritonserver 2.51 aborts on one HTTP JSON request that declares a huge "
        "shape; clients use gRPC)",
    )
    access.add_argument(
        "--api-key-secret", metavar="NAME", help="Secret holding the operator key in 'key' (default: NAME-api-key)"
    )
    server.add_argument("--cpu", metavar="QTY", default="2", help="CPU request (default 2)")
    server.add_argument("--cpu-limit", metavar="QTY", help="CPU limit (default: none)")
    server.add_argument("--memory", metavar="QTY", default="8Gi", help="memory request (default 8Gi)")
    server.add_argument("--memory-limit", metavar="QTY", help="memory limit (default: --memory)")
    server.add_argument("--shm-size", metavar="QTY", help="/dev/shm size (default: from the model instances)")
    server.add_argument(
        "--startup-seconds-per-copy", metavar="S", type=int, default=60, help="startup budget per model copy"
    )
    server.add_argument(
        "--no-check-repository",
        dest="check_repository",
        action="store_false",
        help="no init container running ge-triton check on the mounted repository",
    )
    storage = parser.add_argument_group("model repository volume")
    storage.add_argument(
        "--model-source", metavar="SOURCE", default="pvc", help="pvc (default) or image (baked into the image)"
    )
    storage.add_argument("--pvc", metavar="NAME", dest="pvc_name", help="claim name (default: NAME-models)")
    storage.add_argument(
        "--no-create-pvc", dest="create_pvc", action="store_false", help="the claim exists; do not write one"
    )
    storage.add_argument("--pvc-size", metavar="QTY", help="claim size (default: twice the repository, at least 1Gi)")
    storage.add_argument(
        "--pvc-access-mode", metavar="MODE", default="ReadWriteMany", help="ReadWriteMany, ReadOnlyMany, ..."
    )
    storage.add_argument("--storage-class", metavar="NAME", help="storage class (default: the cluster's)")
    monitoring = parser.add_argument_group("monitoring")
    monitoring.add_argument("--no-monitor", dest="monitor", action="store_false", help="no ServiceMonitor/PodMonitor")
    monitoring.add_argument(
        "--monitor-label",
        dest="monitor_labels",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label the ServiceMonitor for your Prometheus' selector, e.g. release=kube-prometheus-stack",
    )
    monitoring.add_argument("--scrape-interval", metavar="DURATION", default="15s")


def options_from(args: argparse.Namespace) -> DeployOptions:
    node_selector = None
    if args.node_selector is not None:
        node_selector = () if args.node_selector == ["none"] else pairs("--node-selector", args.node_selector)
    return DeployOptions(
        image=args.image,
        name=args.name,
        namespace=args.namespace,
        device_type=choice("--device-type", DeviceType, args.device_type),
        npus=args.npus,
        replicas=args.replicas,
        max_replicas=args.max_replicas,
        autoscaler=choice("--autoscaler", Autoscaler, args.autoscaler),
        queue_target_us=args.queue_target_us,
        prometheus_url=args.prometheus_url,
        kserve=args.kserve,
        model_source=choice("--model-source", ModelSource, args.model_source),
        pvc_name=args.pvc_name,
        create_pvc=args.create_pvc,
        pvc_size=args.pvc_size,
        pvc_access_mode=choice("--pvc-access-mode", AccessMode, args.pvc_access_mode),
        storage_class=args.storage_class,
        image_pull_policy=choice("--image-pull-policy", PullPolicy, args.image_pull_policy),
        image_pull_secrets=tuple(args.image_pull_secrets),
        base_image=args.base_image,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_control_mode=choice("--model-control-mode", ControlMode, args.model_control_mode),
        restricted_apis=parse_apis(args.restricted_apis),
        http_inference=args.http_inference == "on",
        api_key_secret=args.api_key_secret,
        cpu=args.cpu,
        cpu_limit=args.cpu_limit,
        memory=args.memory,
        memory_limit=args.memory_limit,
        shm_size=args.shm_size,
        startup_seconds_per_copy=args.startup_seconds_per_copy,
        node_selector=node_selector,
        device_toleration=args.device_toleration,
        driver_mounts=choice("--driver-mounts", DriverMounts, args.driver_mounts),
        run_as_user=args.run_as_user,
        device_group=args.device_group,
        capabilities=None if args.capabilities is None else _names(args.capabilities),
        spread=choice("--spread", Spread, args.spread),
        rollout=choice("--rollout", Rollout, args.rollout),
        monitor=args.monitor,
        monitor_labels=pairs("--monitor-label", args.monitor_labels),
        scrape_interval=args.scrape_interval,
        check_repository=args.check_repository,
    )


def _names(text: str) -> tuple[str, ...]:
    return () if text.strip() == "none" else tuple(n.strip().upper().removeprefix("CAP_") for n in text.split(","))


def run(args: argparse.Namespace) -> int:
    resolved, written = deploy(args.repository, args.output, options_from(args), force=args.force)
    for warning in resolved.warnings:
        print(f"ge-triton deploy: warning: {warning}", file=sys.stderr)
    for line in summary(resolved):
        print(line)
    print(f"wrote {len(written.manifests)} manifests and the image context to {written.folder}")
    print(f"next: the steps in {written.folder / 'README.md'}")
    return 0
