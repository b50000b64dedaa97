"""A kv-aware engine's InferencePool and its endpoint picker (llm-d's router, pinned image), with what the
picker reads: one InferenceObjective per tier, its plugin configuration, and the API access it watches with.

These are the objects llm-d's chart (llm-d-router-gateway, v0.10.0, config/charts/routerlib) renders, with its
flags and its default plugins, rendered here instead: the chart's picker pod sets no securityContext, so the
engines' namespace, which enforces the restricted Pod Security profile, would refuse it, and an InferencePool must
live beside the pods it selects (docs/decisions.md: KV-aware routing is llm-d's endpoint picker behind one Istio
Gateway per engine)."""

from __future__ import annotations

from typing import Any

import yaml

from tenantry.configs.vllm import PORT as ENGINE_PORT
from tenantry.deploy.common import labels, pinned_image, pod_security, resources, restricted_container
from tenantry.deploy.engine import serving_selector
from tenantry.pins import IMAGES
from tenantry.plan.model import EnginePlan

POOL_API_VERSION = "inference.networking.k8s.io/v1"
OBJECTIVE_API_VERSION = "llm-d.ai/v1alpha2"
DESTINATION_RULE_API_VERSION = "networking.istio.io/v1"
PICKER_PORT = 9002
"""ext-proc, which the Gateway calls for every request (the chart's router.epp.extProcPort)."""
PICKER_HEALTH_PORT = 9003
PICKER_METRICS_PORT = 9090
PICKER_CONFIG = "default-plugins.yaml"
PICKER_LABEL = "llm-d-router-gateway"
"""The chart's selector label for the picker's pods (llm-d-router.selectorLabels, gateway mode)."""

PLUGINS = {
    # The chart's default-plugins.yaml for vLLM over HTTP: a replica's score weighs the prompt prefix it holds
    # (3), its queue (2) and its KV-cache use (2), all read from its /metrics and the picker's own prefix index.
    "apiVersion": "llm-d.ai/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
        {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True}},
        {"type": "core-metrics-extractor"},
    ],
    "schedulingProfiles": [{"name": "default", "plugins": [
        {"pluginRef": "queue-scorer", "weight": 2},
        {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
        {"pluginRef": "prefix-cache-scorer", "weight": 3},
    ]}],
}


def picker_name(e: EnginePlan) -> str:
    """The picker's Deployment, Service, ServiceAccount, Role and ConfigMap (KvRoutingPlan.picker_deployment)."""
    assert e.routing is not None
    return e.routing.picker_deployment


def picker_selector(e: EnginePlan) -> dict[str, str]:
    return {PICKER_LABEL: picker_name(e)}


def pool_spec(e: EnginePlan) -> dict[str, Any]:
    """The engine's serving pods on vLLM's port, picked by its picker. FailOpen: should the picker not answer, the
    Gateway still sends the request to a replica of its choosing, rather than failing it."""
    return {"selector": {"matchLabels": serving_selector(e)}, "targetPorts": [{"number": ENGINE_PORT}], "appProtocol": "http",
            "endpointPickerRef": {"name": picker_name(e), "port": {"number": PICKER_PORT}, "failureMode": "FailOpen"}}


def objective_specs(e: EnginePlan) -> dict[str, dict[str, Any]]:
    """Each tier's InferenceObjective on the pool, by name."""
    assert e.routing is not None
    return {o.name: {"priority": o.priority, "poolRef": {"group": "inference.networking.k8s.io", "name": e.routing.pool}}
            for o in e.routing.objectives}


def picker_args(e: EnginePlan, namespace: str) -> list[str]:
    """The chart's flags for a picker of one InferencePool (routerlib/templates/_deployment.yaml). Its metrics are
    served without the chart's token check: only Prometheus may reach them (the picker's NetworkPolicy)."""
    assert e.routing is not None
    return ["--pool-name", e.routing.pool, "--pool-namespace", namespace, "--pool-group", "inference.networking.k8s.io",
            "--zap-encoder", "json", "--config-file", f"/config/{PICKER_CONFIG}",
            "--grpc-health-port", str(PICKER_HEALTH_PORT), "--tracing=false", "--metrics-endpoint-auth=false"]


def picker_deployment_spec(e: EnginePlan, namespace: str) -> dict[str, Any]:
    assert e.routing is not None
    probe = {"grpc": {"port": PICKER_HEALTH_PORT, "service": "inference-extension"}}
    container = {
        "name": "epp", **pinned_image(IMAGES["llm-d-epp"]),
        "args": picker_args(e, namespace),
        "ports": [{"name": "grpc", "containerPort": PICKER_PORT}, {"name": "grpc-health", "containerPort": PICKER_HEALTH_PORT},
                  {"name": "metrics", "containerPort": PICKER_METRICS_PORT}],
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "livenessProbe": {**probe, "initialDelaySeconds": 5, "periodSeconds": 10},
        "readinessProbe": {**probe, "periodSeconds": 2},
        "resources": resources(e.routing.picker_cpu, e.routing.picker_memory_bytes),
        # The image runs as 65532 (Dockerfile.epp); its own certificate for ext-proc is made in memory.
        "securityContext": restricted_container(user=65532),
        "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_labels = {**labels("routing"), **picker_selector(e)}
    return {
        "replicas": 1,
        "selector": {"matchLabels": picker_selector(e)},
        "template": {"metadata": {"labels": pod_labels}, "spec": {
            "serviceAccountName": picker_name(e),
            "automountServiceAccountToken": True,  # it watches the API (picker_rules)
            # As long as the longest grace period of the pool's pods, as the chart sets it.
            "terminationGracePeriodSeconds": 130,
            "securityContext": pod_security(65532),
            "containers": [container],
            "volumes": [{"name": "config", "configMap": {"name": picker_name(e)}}, {"name": "tmp", "emptyDir": {}}],
        }},
    }


def picker_service_spec(e: EnginePlan) -> dict[str, Any]:
    return {"selector": picker_selector(e), "type": "ClusterIP", "ports": [
        {"name": "grpc-ext-proc", "protocol": "TCP", "port": PICKER_PORT, "appProtocol": "kubernetes.io/h2c"},
        {"name": "http-metrics", "protocol": "TCP", "port": PICKER_METRICS_PORT}]}


def picker_rules() -> list[dict[str, Any]]:
    """What the picker watches, in its own namespace (the chart's Roles, less the groups tenantry installs no CRD of)."""
    read = ["get", "watch", "list"]
    return [{"apiGroups": [""], "resources": ["pods"], "verbs": read},
            {"apiGroups": ["llm-d.ai"], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": read},
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": read}]


def picker_config() -> dict[str, str]:
    return {PICKER_CONFIG: yaml.safe_dump(PLUGINS, sort_keys=False)}


def picker_tls_rule(e: EnginePlan, namespace: str) -> dict[str, Any]:
    """Istio's DestinationRule for the picker, as the chart's istio provider renders it: the picker serves ext-proc
    over TLS with a certificate it makes itself, which the Gateway accepts unverified (inside the namespace)."""
    return {"host": f"{picker_name(e)}.{namespace}.svc.cluster.local",
            "trafficPolicy": {"tls": {"mode": "SIMPLE", "insecureSkipVerify": True}}}
