"""Custom resources wait for the Helm release that installs their CRD, or for the CRD itself where tenantry
applies it (crds/) (docs/decisions.md: Custom resources wait for the release that installs their CRD)."""

from __future__ import annotations

from collections.abc import Iterator

from tenantry.manifests.resources import Resource
from tenantry.pins import chart


CRD_CHARTS = {
    "monitoring.coreos.com": "kube-prometheus-stack",
    "postgresql.cnpg.io": "cloudnative-pg",
    "barmancloud.cnpg.io": "plugin-barman-cloud",
    "nvidia.com": "gpu-operator",
    "nfd.k8s-sigs.io": "gpu-operator",  # its node-feature-discovery subchart
    "keda.sh": "keda",
    "leaderworkerset.x-k8s.io": "lws",
    "networking.istio.io": "istio-base",
}
"""The API groups of custom resources, each with the pinned chart (charts/<name>) whose CRDs define it."""
APPLIED_GROUPS = frozenset({"gateway.networking.k8s.io", "inference.networking.k8s.io", "llm-d.ai"})
"""The API groups whose CRDs tenantry applies itself, from the pinned files under crds/."""
BUILT_IN_GROUPS = frozenset({
    "core", "apps", "batch", "policy", "autoscaling", "admissionregistration.k8s.io", "apiextensions.k8s.io",
    "apiregistration.k8s.io", "certificates.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "flowcontrol.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io", "rbac.authorization.k8s.io",
    "resource.k8s.io", "scheduling.k8s.io", "storage.k8s.io",
    "helm.sh", "yaml", "kustomize",  # pulumi-kubernetes' own kinds: they install objects, they are not one
})


def _api_group(resource: Resource) -> str | None:
    if not resource.type.startswith("kubernetes:"):
        return None
    return resource.type.split(":")[1].split("/")[0]


def _created_before(resource: Resource, by_urn: dict[str, Resource]) -> Iterator[Resource]:
    """Everything Pulumi creates before `resource`: its dependencies and its
    parent, transitively (a child is registered once its parent is, and the
    parent once its own dependencies exist)."""
    seen: set[str] = set()
    queue = [resource]
    while queue:
        current = queue.pop()
        for urn in (*current.dependencies, *([current.parent] if current.parent else [])):
            if urn not in seen and urn in by_urn:
                seen.add(urn)
                queue.append(by_urn[urn])
                yield by_urn[urn]


def custom_resources_wait_for_their_crds(resources: list[Resource]) -> list[str]:
    """Every object of a kind Kubernetes does not build in depends, directly or
    transitively, on the Helm release of the pinned chart that installs its CRD:
    on a fresh cluster the kind does not exist before it ("no matches for kind")."""
    violations = []
    by_urn = {r.urn: r for r in resources if r.urn}
    for resource in resources:
        group = _api_group(resource)
        if group is None or group in BUILT_IN_GROUPS:
            continue
        if group in APPLIED_GROUPS:
            if not any(r.kind == "CustomResourceDefinition" and (r.props.get("spec") or {}).get("group") == group
                       and ((r.props.get("spec") or {}).get("names") or {}).get("kind") == resource.kind
                       for r in _created_before(resource, by_urn)):
                violations.append(f"{resource.label} does not depend on the {resource.kind} CRD tenantry applies (crds/)")
            continue
        if group not in CRD_CHARTS:
            violations.append(f"{resource.label} is a {group} custom resource that no pinned chart is known to define")
            continue
        pin = chart(CRD_CHARTS[group])
        wanted, source = pin.chart, pin.release_source()["chart"]  # an OCI chart by its reference
        if not any(r.kind == "Release" and r.props.get("chart") == source for r in _created_before(resource, by_urn)):
            violations.append(f"{resource.label} does not depend on the Helm release of {wanted}, which installs its CRD")
    return violations


def ready_conditions() -> dict[tuple[str, str], str]:
    """The custom resources something waits for, by API group and kind, and the status condition that says each is
    ready, as the deploy modules name them."""
    from tenantry.deploy.engine import LWS_READY_CONDITION
    from tenantry.deploy.kv_routing import GATEWAY_READY_CONDITION
    from tenantry.deploy.postgres import READY_CONDITION

    return {("postgresql.cnpg.io", "Cluster"): READY_CONDITION,
            ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): LWS_READY_CONDITION,
            ("gateway.networking.k8s.io", "Gateway"): GATEWAY_READY_CONDITION}


def custom_resources_are_awaited(resources: list[Resource]) -> list[str]:
    """`pulumi up` waits for each custom resource of ready_conditions() to be ready (pulumi-kubernetes creates a custom
    resource without waiting unless its pulumi.com/waitFor annotation names a condition), within a timeout of its
    own, and the gateway's Deployment waits for the PostgreSQL Cluster and the engines' Gateways it calls: else
    LiteLLM starts against a database that does not answer yet and crash-loops through `pulumi up`'s wait."""
    from tenantry.deploy.common import TIMEOUT_ANNOTATION, WAIT_FOR_ANNOTATION
    from tenantry.deploy.gateway import NAME as GATEWAY

    found, awaited, conditions = [], [], ready_conditions()
    for r in resources:
        group = str(r.props.get("apiVersion", "")).split("/")[0]
        condition = conditions.get((group, r.kind))
        if condition is None or not r.type.startswith("kubernetes:"):
            continue
        annotations = r.metadata.get("annotations") or {}
        if annotations.get(WAIT_FOR_ANNOTATION) != f"condition={condition}":
            found.append(f"{r.label}: pulumi up does not wait for it ({WAIT_FOR_ANNOTATION} is "
                         f"{annotations.get(WAIT_FOR_ANNOTATION)!r}, not 'condition={condition}')")
        if TIMEOUT_ANNOTATION not in annotations:
            found.append(f"{r.label}: no {TIMEOUT_ANNOTATION}: pulumi up gives up on it after 10 minutes")
        if r.kind in ("Cluster", "Gateway"):
            awaited.append(r)
    gateway = next((r for r in resources if r.kind == "Deployment" and r.metadata.get("name") == GATEWAY), None)
    if gateway is not None:
        found += [f"Deployment {gateway.namespace}/{GATEWAY} does not wait for {r.label}, which it needs at start"
                  for r in awaited if r.urn not in gateway.dependencies]
    return found


CRD_UPGRADES: dict[str, tuple[str, ...] | None] = {
    "lws": None,
    "kube-prometheus-stack": ("crds", "upgradeJob", "enabled"),
    "gpu-operator": ("operator", "upgradeCRD"),
}
"""The pinned charts that ship CRDs under crds/, which Helm installs once and never upgrades, and how tenantry's
release upgrades them: None, applied by Pulumi from the pinned files (skipCrds, tenantry/deploy/common.py:
applied_chart_crds); else the value that turns on the chart's own pre-upgrade hook, which must be true in the
rendered release (kube-prometheus-stack's is off by default at 88.5.3; the GPU Operator's on since v24.9.0)."""
CRD_UPGRADE_DEFAULTS = {"gpu-operator": True}
"""The hook values' chart defaults, where the rendered values may leave them out."""


def chart_crds_are_upgraded(resources: list[Resource]) -> list[str]:
    """Every release of a chart in CRD_UPGRADES upgrades its CRDs with its pin: else a new pin runs a new controller
    on the old CRDs (missing fields are pruned, new kinds do not exist)."""
    from tenantry.pins import pinned_chart_of

    found = []
    applied = {str(r.metadata.get("name")): r for r in resources if r.kind == "CustomResourceDefinition"}
    for release in (r for r in resources if r.kind == "Release"):
        try:
            pin = pinned_chart_of(str(release.props.get("chart")))
        except FileNotFoundError:
            continue  # versions_are_pinned names it
        if pin.name not in CRD_UPGRADES:
            continue
        path = CRD_UPGRADES[pin.name]
        if path is None:
            if release.props.get("skipCrds") is not True:
                found.append(f"Helm release {release.name} installs chart {pin.name}'s CRDs itself (skipCrds is not "
                             "true): Helm never upgrades them")
            for crd in pin.crds():
                name = crd["metadata"]["name"]
                if name not in applied:
                    found.append(f"Helm release {release.name}: CRD {name} of the pinned chart is not applied")
                elif applied[name].urn not in release.dependencies:
                    found.append(f"Helm release {release.name} does not wait for CRD {name}")
            continue
        value: object = release.props.get("values") or {}
        for key in path:
            value = value.get(key, CRD_UPGRADE_DEFAULTS.get(pin.name)) if isinstance(value, dict) else None
        if value is not True:
            found.append(f"Helm release {release.name}: {'.'.join(path)} is {value!r}: chart {pin.name}'s CRDs would "
                         "never be upgraded")
    return found
