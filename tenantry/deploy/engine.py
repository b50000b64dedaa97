"""One model deployment: vLLM replicas with the Plan's arguments and GPUs,
their weights and adapters fetched before they start, a Service, a
PodDisruptionBudget and a ServiceMonitor."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import (
    ENGINE_LABEL,
    POOL_LABEL,
    cluster_service,
    labels,
    mebibytes,
    pinned_image,
    pod_security,
    resources,
    restricted_container,
    service_monitor,
    spread_across_nodes,
)
from tenantry.deploy.identity import BucketAccess
from tenantry.deploy.sources import Source, huggingface_script, parse_source, rclone_script
from tenantry.plan.model import EnginePlan
from tenantry.configs.vllm import PORT, model_reference, vllm_args, vllm_env

MODELS_DIR = "/models"
ADAPTERS_DIR = "/adapters"
WEIGHTS_DIR = f"{MODELS_DIR}/weights"
"""Where weights that are not on the Hub are synced to."""
ENGINE_PRIORITY_CLASS = "tenantry-engine"
HF_TOKEN_SECRET = "tenantry-hf-token"
"""Optional Secret (key `token`) for gated Hub models such as Llama; created by the operator of the platform."""
VLLM_USER = 10001
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
PROBE_PERIOD_SECONDS = 10


@dataclass(frozen=True)
class EngineArgs:
    engine: EnginePlan
    namespace: str
    image: str
    fetch_image: str
    storage_class: str | None
    monitoring_release: pulumi.Resource
    """The Helm release that installs the ServiceMonitor CRD."""
    scrape_interval_seconds: int
    """The Plan's engine scrape interval (admission reads what Prometheus scraped)."""
    bucket_access: BucketAccess | None = None
    """The stack's cloud identity, for pods that fetch from s3:// or gs://."""


@dataclass(frozen=True)
class Fetches:
    """What an engine's pods fetch before vLLM starts: rclone copies (weights
    not on the Hub, adapters in buckets or on claims) and Hub adapters (vLLM
    downloads Hub weights itself)."""

    config_map: str
    weights_on_hub: bool
    synced: tuple[tuple[Source, str], ...]
    from_hub: tuple[tuple[Source, str], ...]

    @property
    def scripts(self) -> dict[str, str]:
        scripts: dict[str, str] = {}
        if self.synced:
            scripts["fetch.sh"] = rclone_script(self.synced)
        if self.from_hub:
            scripts["fetch_hub.py"] = huggingface_script(self.from_hub)
        return scripts

    @property
    def claims(self) -> list[str]:
        """The claims synced sources are read from, each mounted read-only."""
        return sorted({s.claim for s, _ in self.synced if s.claim})

    @property
    def reads_buckets(self) -> bool:
        return any(s.scheme in ("s3", "gs") for s, _ in self.synced)

    @property
    def digest(self) -> str:
        return hashlib.sha256("".join(sorted(self.scripts.values())).encode()).hexdigest()[:16]


def engine_fetches(engine: EnginePlan) -> Fetches:
    model_source = parse_source(engine.source)
    adapters = [(parse_source(a.source), f"{ADAPTERS_DIR}/{a.name}") for a in engine.lora.adapters]
    synced = [(model_source, WEIGHTS_DIR)] if model_source.scheme != "hf" else []
    synced += [(s, d) for s, d in adapters if s.scheme != "hf"]
    return Fetches(
        config_map=f"{engine.name}-fetch",
        weights_on_hub=model_source.scheme == "hf",
        synced=tuple(synced),
        from_hub=tuple((s, d) for s, d in adapters if s.scheme == "hf"),
    )


def engine_selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", ENGINE_LABEL: name}


class Engine(pulumi.ComponentResource):
    def __init__(self, name: str, args: EngineArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:engine:Engine", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        e, ns = args.engine, args.namespace
        selector = engine_selector(e.name)
        pod_labels = {**labels("engine"), **selector, POOL_LABEL: e.pool}
        fetches = engine_fetches(e)
        if fetches.scripts:
            k8s.core.v1.ConfigMap(
                f"{name}-fetch", metadata={"name": fetches.config_map, "namespace": ns, "labels": pod_labels},
                data=fetches.scripts, opts=child,
            )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": e.name, "namespace": ns, "labels": pod_labels},
            spec=_deployment_spec(args, fetches, selector, pod_labels),
            opts=child,
        )
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata={"name": e.name, "namespace": ns, "labels": pod_labels},
            # One replica down at a time, so a drain never takes a whole model away.
            spec={"maxUnavailable": 1, "selector": {"matchLabels": selector}},
            opts=child,
        )
        self.service = cluster_service(f"{name}-service", e.name, ns, pod_labels, selector, "http", PORT, child)
        service_monitor(f"{name}-monitor", e.name, ns, selector, port="http", path="/metrics", opts=child,
                        crd_release=args.monitoring_release, interval_seconds=args.scrape_interval_seconds)
        self.url = f"http://{e.name}.{ns}.svc:{PORT}/v1"
        self.register_outputs({"url": self.url})


def _deployment_spec(
    args: EngineArgs, fetches: Fetches, selector: dict[str, str], pod_labels: dict[str, str]
) -> dict[str, Any]:
    e = args.engine
    return {
        "replicas": e.replicas,
        "selector": {"matchLabels": selector},
        # No spare GPUs to surge into: replace one replica at a time.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        "template": {
            # Restart the pods when what they fetch changes, not only when the Deployment does.
            "metadata": {"labels": pod_labels, "annotations": {"tenantry.io/fetch-digest": fetches.digest}},
            "spec": {
                "priorityClassName": ENGINE_PRIORITY_CLASS,
                "automountServiceAccountToken": False,
                **_bucket_identity(args, fetches),
                "nodeSelector": {POOL_LABEL: e.pool},
                "tolerations": _tolerations(e),
                "affinity": spread_across_nodes(selector),
                "securityContext": pod_security(VLLM_USER),
                "terminationGracePeriodSeconds": 60,
                "initContainers": _init_containers(args, fetches),
                "containers": [_vllm_container(args, fetches)],
                "volumes": _volumes(args, fetches, pod_labels),
            },
        },
    }


def _bucket_access(args: EngineArgs, fetches: Fetches) -> BucketAccess | None:
    """The cloud identity, when this engine's pods fetch from a bucket (docs/decisions.md: Bucket readers act as one declared identity)."""
    return args.bucket_access if fetches.reads_buckets else None


def _bucket_identity(args: EngineArgs, fetches: Fetches) -> dict[str, Any]:
    access = _bucket_access(args, fetches)
    return {"serviceAccountName": access.service_account} if access else {}


def _tolerations(e: EnginePlan) -> list[dict[str, str]]:
    tolerations = [{"key": POOL_LABEL, "operator": "Equal", "value": e.pool, "effect": "NoSchedule"}]
    if e.gpu_resource:
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _volumes(args: EngineArgs, fetches: Fetches, pod_labels: dict[str, str]) -> list[dict[str, Any]]:
    pod = args.engine.pod
    return [
        {"name": "models", "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": pod_labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": args.storage_class,
                     "resources": {"requests": {"storage": mebibytes(pod.model_cache_bytes)}}},
        }}},
        {"name": "adapters", "emptyDir": {"sizeLimit": mebibytes(pod.adapter_store_bytes)}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": mebibytes(pod.shm_bytes)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
        *({"name": f"source-{claim}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
          for claim in fetches.claims),
        *([{"name": "fetch", "configMap": {"name": fetches.config_map}}] if fetches.scripts else []),
        *(access.volumes if (access := _bucket_access(args, fetches)) else ()),
        {"name": "hf-token", "secret": {"secretName": HF_TOKEN_SECRET, "optional": True}},
    ]


def _init_containers(args: EngineArgs, fetches: Fetches) -> list[dict[str, Any]]:
    """rclone for synced sources, huggingface_hub (from the vLLM image) for Hub adapters."""
    common = {"resources": resources(0.5, 512 * 2**20), "securityContext": restricted_container(user=VLLM_USER)}
    fetch_mount = {"name": "fetch", "mountPath": "/fetch", "readOnly": True}
    tmp_mount = {"name": "tmp", "mountPath": "/tmp"}
    containers = []
    if fetches.synced:
        access = _bucket_access(args, fetches)
        source_mounts = [{"name": f"source-{c}", "mountPath": f"/sources/{c}", "readOnly": True}
                         for c in fetches.claims]
        containers.append({
            "name": "fetch",
            **pinned_image(args.fetch_image),
            "command": ["sh", "/fetch/fetch.sh"],
            "volumeMounts": [{"name": "models", "mountPath": MODELS_DIR},
                             {"name": "adapters", "mountPath": ADAPTERS_DIR},
                             fetch_mount, tmp_mount, *source_mounts, *(access.volume_mounts if access else ())],
            "env": [{"name": "HOME", "value": "/tmp"}, *(access.env if access else ())],
            **common,
        })
    if fetches.from_hub:
        containers.append({
            "name": "fetch-hub",
            **pinned_image(args.image),
            "command": ["python3", "/fetch/fetch_hub.py"],
            "volumeMounts": [{"name": "adapters", "mountPath": ADAPTERS_DIR}, fetch_mount, tmp_mount,
                             {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}],
            "env": _vllm_env(),
            **common,
        })
    return containers


def _vllm_container(args: EngineArgs, fetches: Fetches) -> dict[str, Any]:
    e = args.engine
    gpu_resources = {e.gpu_resource: str(e.gpu_resource_count)} if e.gpu_resource else {}
    args_list = vllm_args(e, model=model_reference(e, WEIGHTS_DIR), adapter_dir=ADAPTERS_DIR,
                          download_dir=MODELS_DIR if fetches.weights_on_hub else None)
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": PROBE_PERIOD_SECONDS, "timeoutSeconds": 5}
    return {
        "name": "vllm",
        **pinned_image(args.image),
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": args_list,
        "ports": [{"name": "http", "containerPort": PORT}],
        "env": _vllm_env() + [{"name": k, "value": v} for k, v in vllm_env(e).items()],
        "resources": resources(e.pod.cpu, e.pod.memory_bytes, gpu_resources),
        "volumeMounts": [{"name": "models", "mountPath": MODELS_DIR}, {"name": "adapters", "mountPath": ADAPTERS_DIR},
                         {"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}],
        # The Plan's startup time, in probe periods rounded up.
        "startupProbe": {**probe, "failureThreshold": -(-e.pod.startup_seconds // PROBE_PERIOD_SECONDS)},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {**probe, "failureThreshold": 6},
        # vLLM and its kernels cache compiled code under HOME; everything writable is a volume.
        "securityContext": restricted_container(read_only_root=False, user=VLLM_USER),
    }


def _vllm_env() -> list[dict[str, Any]]:
    return [
        {"name": "HOME", "value": "/tmp"},
        {"name": "LOGNAME", "value": "vllm"},  # the image has no passwd entry for a non-root user
        {"name": "HF_HOME", "value": f"{MODELS_DIR}/hf"},
        # A file, not an environment variable: huggingface_hub reads it when present.
        {"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/token"},
        # Adapters are the ones the spec lists, validated at plan time; none may be loaded at run time.
        {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "false"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
    ]
