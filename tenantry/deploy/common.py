"""Small shared pieces of the Kubernetes components: labels, quantities,
security contexts, ServiceMonitors. Nothing here sizes anything: quantities
are the Plan's figures in Kubernetes units, and `resources` lets CPU burst to
twice the request (docs/decisions.md: Components convert the Plan's figures,
they do not plan)."""

from __future__ import annotations

import math
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.pins import Chart

PART_OF = "tenantry"
TENANT_LABEL = "tenantry.io/tenant"
TIER_LABEL = "tenantry.io/tier"
COMPONENT_LABEL = "app.kubernetes.io/component"
ENGINE_LABEL = "tenantry.io/engine"
POOL_POD_LABEL = "tenantry.io/pool"
"""On an engine's pods: the pool they run on (runbooks select them by it). The nodes' own label is
node_registration.POOL_LABEL, which only the platform sets."""
DEDICATED_POD_LABEL = "tenantry.io/dedicated-to"
"""On the pods of an engine that serves one tenant alone: that tenant."""
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
"""The labels of kube-prometheus-stack's Prometheus pods, which every policy that lets Prometheus scrape selects."""
KUBE_DNS_POD_LABELS = {"k8s-app": "kube-dns"}
"""The labels of the cluster DNS's pods in kube-system (kube-dns and CoreDNS alike)."""
NODE_LOCAL_DNS_CIDR = "169.254.20.10/32"
"""NodeLocal DNSCache's link-local address (kubernetes/dns's nodelocaldns; the address its manifests, GKE, EKS and
AKS use): once it runs on a node, its pods send DNS there, to a host-network listener no podSelector matches."""
DNS_EGRESS = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                      "podSelector": {"matchLabels": KUBE_DNS_POD_LABELS}},
                     {"ipBlock": {"cidr": NODE_LOCAL_DNS_CIDR}}],
              "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
"""The egress rule to the cluster's DNS, kube-dns's pods or NodeLocal DNSCache, which every egress policy of tenantry
keeps open."""


WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
"""pulumi-kubernetes creates a custom resource without waiting for it (its generic await is opt-in,
PULUMI_K8S_AWAIT_ALL); this annotation makes `pulumi up` wait for the condition it names before anything that
depends on the object is created (provider/pkg/metadata/overrides.go: ReadyCondition)."""
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
"""How long `pulumi up` waits for the object to become ready; pulumi-kubernetes' default of 10 minutes is
shorter than a large checkpoint's fetch or a first pull of some images (docs/decisions.md: pulumi up waits as long
as the Plan allows)."""


def waits_until(condition: str, seconds: int) -> dict[str, str]:
    """Annotations that have `pulumi up` wait up to `seconds` for the object's status condition to be True."""
    return {WAIT_FOR_ANNOTATION: f"condition={condition}", TIMEOUT_ANNOTATION: str(seconds)}


def gateway_egress(namespace: str, selector: dict[str, str], port: int) -> dict:
    """The egress rule to the gateway's pods on its port: the one way out of a tenant namespace besides DNS."""
    return {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "podSelector": {"matchLabels": selector}}],
            "ports": [{"protocol": "TCP", "port": port}]}


def labels(component: str, **extra: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": PART_OF, COMPONENT_LABEL: component, **extra}


def mebibytes(n: int) -> str:
    """A Kubernetes quantity that is never below the bytes asked for."""
    return f"{math.ceil(n / 2**20)}Mi"


def cores(n: float) -> str:
    return f"{round(n * 1000)}m"


def resources(cpu: float, memory_bytes: int, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Requests as planned; memory limited at the request (no overcommit of host
    memory), CPU allowed to burst to twice the request."""
    return {
        "requests": {"cpu": cores(cpu), "memory": mebibytes(memory_bytes), **(extra or {})},
        "limits": {"cpu": cores(2 * cpu), "memory": mebibytes(memory_bytes), **(extra or {})},
    }


def pinned_image(image: str) -> dict[str, str]:
    """Image fields of a container. Always asks the registry for the tag's
    current digest, so a node never runs a stale copy of a re-pushed tag."""
    return {"image": image, "imagePullPolicy": "Always"}


def restricted_container(read_only_root: bool = True, user: int = 10001) -> dict[str, Any]:
    """Kubernetes' restricted Pod Security profile, as far as the image allows."""
    return {
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": user,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": read_only_root,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security(user: int = 10001) -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": user, "runAsGroup": user, "fsGroup": user,
            "seccompProfile": {"type": "RuntimeDefault"}}


def service_monitor(
    resource_name: str,
    name: str,
    namespace: str,
    selector: dict[str, str],
    *,
    port: str,
    path: str,
    opts: pulumi.ResourceOptions,
    crd_release: pulumi.Resource,
    interval_seconds: int = 15,
    bearer_secret: tuple[str, str] | None = None,
) -> k8s.apiextensions.CustomResource:
    """Prometheus Operator scrapes the Services matching `selector` (kube-prometheus-stack
    selects ServiceMonitors in every namespace, see charts/kube-prometheus-stack).
    Created after `crd_release`, the Helm release that installs the ServiceMonitor
    CRD: on a fresh cluster the kind does not exist before it."""
    endpoint: dict[str, Any] = {"port": port, "path": path, "interval": f"{interval_seconds}s"}
    if bearer_secret:
        endpoint["authorization"] = {"type": "Bearer", "credentials": {"name": bearer_secret[0], "key": bearer_secret[1]}}
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version="monitoring.coreos.com/v1",
        kind="ServiceMonitor",
        metadata={"name": name, "namespace": namespace, "labels": labels("monitoring")},
        spec={"selector": {"matchLabels": selector}, "endpoints": [endpoint], "namespaceSelector": {"matchNames": [namespace]}},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[crd_release])),
    )


def chart_namespace(resource_name: str, pin: Chart, pod_security_level: str, parent: pulumi.Resource) -> k8s.core.v1.Namespace:
    """The namespace a pinned chart installs into, with its Pod Security level."""
    return k8s.core.v1.Namespace(
        resource_name,
        metadata={"name": pin.namespace, "labels": {**labels(pin.name),
                                                    "pod-security.kubernetes.io/enforce": pod_security_level}},
        opts=pulumi.ResourceOptions(parent=parent),
    )


def pinned_release(
    resource_name: str, pin: Chart, values: dict[str, Any], parent: pulumi.Resource, depends_on: list[pulumi.Resource],
    skip_crds: bool = False,
) -> k8s.helm.v3.Release:
    """A Helm release of a chart exactly as charts/<name>/chart.yaml pins it; with `skip_crds`, Helm leaves the
    chart's crds/ to applied_chart_crds."""
    return k8s.helm.v3.Release(
        resource_name,
        name=pin.name,
        **pin.release_source(),
        version=pin.version,
        namespace=pin.namespace,
        values=values,
        skip_crds=skip_crds,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )


CRD_TAKEOVER_ANNOTATIONS = {"pulumi.com/patchForce": "true"}
"""On a CRD Pulumi applies: a cluster where Helm installed it first (an earlier tenantry, or by hand) hands its
fields over to Pulumi's server-side apply instead of failing on the conflict."""


def applied_chart_crds(resource_prefix: str, pin: Chart, parent: pulumi.Resource
                       ) -> list[k8s.apiextensions.v1.CustomResourceDefinition]:
    """The chart's CRDs as its pinned release ships them (charts/<name>/crds), applied by Pulumi: Helm installs a
    chart's crds/ on the first install only and never upgrades them, so a new pin would run a new controller on
    the old schema. Its release is installed with skip_crds and after these."""
    crds = []
    for crd in pin.crds():
        metadata = {**crd["metadata"], "annotations": {**(crd["metadata"].get("annotations") or {}),
                                                       **CRD_TAKEOVER_ANNOTATIONS}}
        crds.append(k8s.apiextensions.v1.CustomResourceDefinition(
            f"{resource_prefix}-{metadata['name']}", metadata=metadata, spec=crd["spec"],
            opts=pulumi.ResourceOptions(parent=parent)))
    return crds


def spread_across_nodes(selector: dict[str, str]) -> dict[str, Any]:
    """Prefer one replica per node, so a node failure takes one replica, not all."""
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"},
    }]}}


def cluster_service(
    resource_name: str, name: str, namespace: str, meta_labels: dict[str, str], selector: dict[str, str],
    port_name: str, port: int, opts: pulumi.ResourceOptions,
) -> k8s.core.v1.Service:
    return k8s.core.v1.Service(
        resource_name,
        metadata={"name": name, "namespace": namespace, "labels": meta_labels},
        spec={"selector": selector, "ports": [{"name": port_name, "port": port, "targetPort": port_name}]},
        opts=opts,
    )
