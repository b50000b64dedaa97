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
from tenantry.deploy.sources import huggingface_script, parse_source, rclone_script
from tenantry.plan.model import EnginePlan
from tenantry.configs.vllm import PORT, model_reference, vllm_args, vllm_env

MODELS_DIR = "/models"
ADAPTERS_DIR = "/adapters"
ENGINE_PRIORITY_CLASS = "tenantry-engine"
HF_TOKEN_SECRET = "tenantry-hf-token"
"""Optional Secret (key `token`) for gated Hub models such as Llama; created by the operator of the platform."""
VLLM_USER = 10001
HF_TOKEN_DIR = "/var/run/secrets/huggingface"


@dataclass(frozen=True)
class EngineArgs:
    engine: EnginePlan
    namespace: str
    image: str
    fetch_image: str
    storage_class: str | None


def engine_selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", ENGINE_LABEL: name}


class Engine(pulumi.ComponentResource):
    def __init__(self, name: str, args: EngineArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:engine:Engine", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        e, ns = args.engine, args.namespace
        selector = engine_selector(e.name)
        pod_labels = {**labels("engine"), **selector, POOL_LABEL: e.pool}

        model_source = parse_source(e.source)
        adapters = [(parse_source(a.source), f"{ADAPTERS_DIR}/{a.name}") for a in e.lora.adapters]
        weights_dir = f"{MODELS_DIR}/weights"
        synced = [(model_source, weights_dir)] if model_source.scheme != "hf" else []
        synced += [(s, d) for s, d in adapters if s.scheme != "hf"]
        from_hub = [(s, d) for s, d in adapters if s.scheme == "hf"]

        scripts: dict[str, str] = {}
        if synced:
            scripts["fetch.sh"] = rclone_script(synced)
        if from_hub:
            scripts["fetch_hub.py"] = huggingface_script(from_hub)
        fetch_name = f"{e.name}-fetch"
        if scripts:
            k8s.core.v1.ConfigMap(
                f"{name}-fetch", metadata={"name": fetch_name, "namespace": ns, "labels": pod_labels}, data=scripts,
                opts=child,
            )

        claims = sorted({s.claim for s, _ in synced if s.claim})
        volumes: list[dict[str, Any]] = [
            {"name": "models", "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": args.storage_class,
                         "resources": {"requests": {"storage": mebibytes(e.pod.model_cache_bytes)}}},
            }}},
            {"name": "adapters", "emptyDir": {"sizeLimit": mebibytes(e.pod.adapter_store_bytes)}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": mebibytes(e.pod.shm_bytes)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
            *({"name": f"source-{claim}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}} for claim in claims),
            *([{"name": "fetch", "configMap": {"name": fetch_name}}] if scripts else []),
            {"name": "hf-token", "secret": {"secretName": HF_TOKEN_SECRET, "optional": True}},
        ]
        source_mounts = [{"name": f"source-{c}", "mountPath": f"/sources/{c}", "readOnly": True} for c in claims]
        fetch_resources = resources(0.5, 512 * 2**20)
        init_containers = []
        if synced:
            init_containers.append({
                "name": "fetch",
                **pinned_image(args.fetch_image),
                "command": ["sh", "/fetch/fetch.sh"],
                "volumeMounts": [{"name": "models", "mountPath": MODELS_DIR}, {"name": "adapters", "mountPath": ADAPTERS_DIR},
                                 {"name": "fetch", "mountPath": "/fetch", "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"}, *source_mounts],
                "env": [{"name": "HOME", "value": "/tmp"}],
                "resources": fetch_resources,
                "securityContext": restricted_container(user=VLLM_USER),
            })
        if from_hub:
            init_containers.append({
                "name": "fetch-hub",
                **pinned_image(args.image),
                "command": ["python3", "/fetch/fetch_hub.py"],
                "volumeMounts": [{"name": "adapters", "mountPath": ADAPTERS_DIR},
                                 {"name": "fetch", "mountPath": "/fetch", "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"},
                                 {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}],
                "env": _vllm_env(),
                "resources": fetch_resources,
                "securityContext": restricted_container(user=VLLM_USER),
            })

        gpu_resources = {e.gpu_resource: str(e.gpu_resource_count)} if e.gpu_resource else {}
        model = model_reference(e, weights_dir)
        args_list = vllm_args(e, model=model, adapter_dir=ADAPTERS_DIR,
                              download_dir=MODELS_DIR if model_source.scheme == "hf" else None)
        probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
        container = {
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
            "startupProbe": {**probe, "failureThreshold": -(-e.pod.startup_seconds // 10)},
            "readinessProbe": {**probe, "failureThreshold": 3},
            "livenessProbe": {**probe, "failureThreshold": 6},
            # vLLM and its kernels cache compiled code under HOME; everything writable is a volume.
            "securityContext": restricted_container(read_only_root=False, user=VLLM_USER),
        }
        tolerations = [{"key": POOL_LABEL, "operator": "Equal", "value": e.pool, "effect": "NoSchedule"}]
        if e.gpu_resource:
            tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        # Restart the pods when what they fetch changes, not only when the Deployment does.
        fetch_digest = hashlib.sha256("".join(sorted(scripts.values())).encode()).hexdigest()[:16]

        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": e.name, "namespace": ns, "labels": pod_labels},
            spec={
                "replicas": e.replicas,
                "selector": {"matchLabels": selector},
                # No spare GPUs to surge into: replace one replica at a time.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": pod_labels, "annotations": {"tenantry.io/fetch-digest": fetch_digest}},
                    "spec": {
                        "priorityClassName": ENGINE_PRIORITY_CLASS,
                        "automountServiceAccountToken": False,
                        "nodeSelector": {POOL_LABEL: e.pool},
                        "tolerations": tolerations,
                        "affinity": spread_across_nodes(selector),
                        "securityContext": pod_security(VLLM_USER),
                        "terminationGracePeriodSeconds": 60,
                        "initContainers": init_containers,
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
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
        service_monitor(f"{name}-monitor", e.name, ns, selector, port="http", path="/metrics", opts=child)
        self.url = f"http://{e.name}.{ns}.svc:{PORT}/v1"
        self.register_outputs({"url": self.url})


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
