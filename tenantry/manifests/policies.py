"""tenantry's deployment policies as pure functions over the resources a
program registers (tenantry.manifests.resources). The policy pack under
policy/ runs them during `pulumi preview --policy-pack policy`;
`tenantry manifests` and the tests run them over the mock rendering of every
stack (docs/decisions.md: Policies are written once). Each violation names the
resource it is about. This module holds the platform-wide rules;
crd_policies.py the dependency graph of custom resources, engine_policies.py
what engines run and fetch.
"""

from __future__ import annotations

from typing import Any

from tenantry.deploy.common import DNS_EGRESS, PROMETHEUS_POD_LABELS, gateway_egress
from tenantry.manifests.resources import (
    ENGINE_SELECTOR_KEY,
    ENGINE_WORKLOAD_KINDS,
    TENANT_LABEL,
    WORKLOAD_KINDS,
    Resource,
    containers,
    contains_secret,
    template_labels,
    pod_spec,
    selects,
)
from tenantry.pins import IMAGES, image_pin_problem, pinned_chart_of


def tenant_namespaces_are_isolated(resources: list[Resource], gateway_selector: dict[str, str],
                                   gateway_port: int) -> list[str]:
    """Every tenant namespace has a ResourceQuota, a LimitRange and a NetworkPolicy over all its pods in both
    directions, and its policies together let nothing in and only DNS and the gateway's pods (on the gateway's
    port, in the gateway's namespace) out."""
    violations = []
    gateway_namespaces = {r.namespace for r in resources if r.kind in WORKLOAD_KINDS
                          and gateway_selector.items() <= template_labels(r).items()}
    allowed = [DNS_EGRESS, *(gateway_egress(ns, gateway_selector, gateway_port) for ns in sorted(gateway_namespaces))]
    inside: dict[str | None, list[Resource]] = {}
    for r in resources:
        inside.setdefault(r.namespace, []).append(r)
    tenants = [r for r in resources if r.kind == "Namespace" and TENANT_LABEL in (r.metadata.get("labels") or {})]
    for namespace in tenants:
        ns = namespace.metadata["name"]
        kinds = {r.kind for r in inside.get(ns, [])}
        if "ResourceQuota" not in kinds:
            violations.append(f"tenant namespace {ns} has no ResourceQuota")
        if "LimitRange" not in kinds:
            violations.append(f"tenant namespace {ns} has no LimitRange")
        policies = [r for r in inside.get(ns, []) if r.kind == "NetworkPolicy"]
        if not any((p.props.get("spec") or {}).get("podSelector") in ({}, None)
                   and {"Ingress", "Egress"} <= set((p.props.get("spec") or {}).get("policyTypes") or [])
                   for p in policies):
            violations.append(f"tenant namespace {ns} has no default-deny NetworkPolicy (ingress and egress) "
                              "over all its pods")
        for policy in policies:
            spec = policy.props.get("spec") or {}
            if spec.get("ingress"):
                violations.append(f"NetworkPolicy {ns}/{policy.metadata.get('name')} lets traffic into a tenant "
                                  "namespace")
            violations += [f"NetworkPolicy {ns}/{policy.metadata.get('name')} lets a tenant out to {rule}, not only "
                           "to DNS and the gateway" for rule in spec.get("egress") or [] if rule not in allowed]
    return violations


def engines_reachable_only_from_gateway(resources: list[Resource], gateway_selector: dict[str, str],
                                        monitoring_namespace: str) -> list[str]:
    """Every engine's pods are selected by an ingress NetworkPolicy, and every
    policy selecting them admits only the gateway's pods (same namespace),
    Prometheus, and, for a kv-aware engine, its endpoint picker and the Gateways
    routed to its pool (their pods); no engine Service leaves the cluster network."""
    violations = []
    engines = [r for r in resources if r.kind in ENGINE_WORKLOAD_KINDS and ENGINE_SELECTOR_KEY in template_labels(r)]
    policies = [r for r in resources if r.kind == "NetworkPolicy"]
    for engine in engines:
        pod_labels = template_labels(engine)
        guarding = [p for p in policies if p.namespace == engine.namespace
                    and selects((p.props.get("spec") or {}).get("podSelector") or {}, pod_labels)
                    and "Ingress" in ((p.props.get("spec") or {}).get("policyTypes") or [])]
        if not guarding:
            violations.append(f"engine {engine.label} has no NetworkPolicy guarding its ingress")
        routed = _routed_peers(resources, engine.namespace, pod_labels)
        for policy in guarding:
            for rule in (policy.props.get("spec") or {}).get("ingress") or []:
                peers = rule.get("from")
                if not peers:
                    violations.append(f"engine {engine.label} is reachable from anywhere through {policy.label}")
                for peer in peers or []:
                    if not _allowed_engine_peer(peer, gateway_selector, monitoring_namespace) and peer not in routed \
                            and not (engine.kind == "LeaderWorkerSet" and _own_stage(peer, pod_labels)):
                        violations.append(f"engine {engine.label} is reachable from {peer} through {policy.label}")
    for service in (r for r in resources if r.kind == "Service"):
        selector = (service.props.get("spec") or {}).get("selector") or {}
        if ENGINE_SELECTOR_KEY in selector and (service.props.get("spec") or {}).get("type") in ("NodePort", "LoadBalancer"):
            violations.append(f"engine {service.label} is exposed outside the cluster")
    return violations


PUBLIC_SERVICE_TYPES = ("NodePort", "LoadBalancer")


def nothing_is_public(resources: list[Resource]) -> list[str]:
    """No Service leaves the cluster, neither one tenantry renders nor one Istio creates for a Gateway (of class
    istio a LoadBalancer unless the Gateway's own annotation says otherwise): the spec has no external entry, so
    a public address is always an accident; tenants reach the platform through the gateway's Service, exposed by
    the platform team's own ingress (docs/platform.md)."""
    from tenantry.manifests.routing_policies import istio_gateway, istio_gateway_service_type

    found = [f"{r.label} is of type {kind}: it would be reachable from outside the cluster" for r in resources
             if r.kind == "Service" and (kind := (r.props.get("spec") or {}).get("type")) in PUBLIC_SERVICE_TYPES]
    found += [f"Gateway {r.namespace}/{r.metadata.get('name')}'s Service would be {kind}: Istio creates it "
              f"reachable from outside the cluster" for r in resources
              if istio_gateway(r) and (kind := istio_gateway_service_type(r)) in PUBLIC_SERVICE_TYPES]
    return found


def _routed_peers(resources: list[Resource], namespace: str | None, pod_labels: dict[str, str]) -> list[dict[str, Any]]:
    """The pods a kv-aware engine's pods may admit besides the gateway: for each InferencePool selecting them, the
    pods of its endpoint picker's Service and of every Gateway whose HTTPRoute sends to the pool."""
    from tenantry.deploy.kv_routing import GATEWAY_NAME_LABEL

    here = [r for r in resources if r.namespace == namespace]
    services = {r.metadata.get("name"): r for r in here if r.kind == "Service"}
    peers: list[dict[str, Any]] = []
    for pool in (r for r in here if r.kind == "InferencePool"):
        spec = pool.props.get("spec") or {}
        if not selects(spec.get("selector") or {}, pod_labels):
            continue
        picker = services.get((spec.get("endpointPickerRef") or {}).get("name"))
        if picker is not None:
            peers.append({"podSelector": {"matchLabels": (picker.props.get("spec") or {}).get("selector") or {}}})
        for route in (r for r in here if r.kind == "HTTPRoute"):
            route_spec = route.props.get("spec") or {}
            if any(b.get("kind") == "InferencePool" and b.get("name") == pool.metadata.get("name")
                   for rule in route_spec.get("rules") or [] for b in rule.get("backendRefs") or []):
                peers += [{"podSelector": {"matchLabels": {GATEWAY_NAME_LABEL: parent.get("name")}}}
                          for parent in route_spec.get("parentRefs") or [] if parent.get("kind") == "Gateway"]
    return peers


def _own_stage(peer: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    """A peer that is the engine's own pods, in its namespace: the stages of a replica across nodes."""
    pods = (peer.get("podSelector") or {}).get("matchLabels") or {}
    return (set(peer) == {"podSelector"} and pods.get(ENGINE_SELECTOR_KEY) == pod_labels.get(ENGINE_SELECTOR_KEY)
            and selects({"matchLabels": pods}, pod_labels))


def _allowed_engine_peer(peer: dict[str, Any], gateway_selector: dict[str, str], monitoring_namespace: str) -> bool:
    pods = (peer.get("podSelector") or {}).get("matchLabels") or {}
    namespaces = peer.get("namespaceSelector")
    if "ipBlock" in peer:
        return False
    if namespaces is None:
        return pods == gateway_selector  # the gateway, in the engines' own namespace
    ns_labels = namespaces.get("matchLabels") or {}
    return (ns_labels == {"kubernetes.io/metadata.name": monitoring_namespace} and not namespaces.get("matchExpressions")
            and pods == PROMETHEUS_POD_LABELS)


def containers_have_requests_and_limits(resources: list[Resource]) -> list[str]:
    violations = []
    for resource in resources:
        for container in containers(resource):
            res = container.get("resources") or {}
            for bound in ("requests", "limits"):
                missing = [k for k in ("cpu", "memory") if k not in (res.get(bound) or {})]
                if missing:
                    violations.append(f"{resource.label} container {container.get('name')} has no {bound} for "
                                      f"{', '.join(missing)}")
    return violations


def versions_are_pinned(resources: list[Resource]) -> list[str]:
    """Every image is one tenantry.pins names (a fixed tag, never latest, and when a digest
    follows it a well-formed one);
    every Helm release is the chart version pinned under charts/."""
    violations = []
    pinned_images = set(IMAGES.values())
    for resource in resources:
        for container in containers(resource):
            image = container.get("image", "")
            if image not in pinned_images:
                violations.append(f"{resource.label} container {container.get('name')} runs {image!r}, "
                                  "which tenantry.pins does not pin")
            if problem := image_pin_problem(image):
                violations.append(f"{resource.label} container {container.get('name')} image {image!r} {problem}")
        if resource.kind == "Release":
            name = resource.props.get("chart")
            try:
                pin = pinned_chart_of(str(name))
            except FileNotFoundError:
                violations.append(f"Helm release {resource.name} installs chart {name!r}, which charts/ does not pin")
                continue
            if not pin.is_release_of(resource.props):
                violations.append(f"Helm release {resource.name} is not chart {pin.chart} {pin.version} from {pin.repository}")
    return violations


def no_secret_in_plain_text(resources: list[Resource]) -> list[str]:
    """No secret value in a ConfigMap, in a container's literal environment, or
    in a Helm release's values."""
    violations = []
    for resource in resources:
        if resource.kind == "ConfigMap" and contains_secret(resource.props.get("data")):
            violations.append(f"{resource.label} holds a secret value; use a Secret")
        if resource.kind == "Release" and contains_secret(resource.props.get("values")):
            violations.append(f"Helm release {resource.name} has a secret in its values")
        for container in containers(resource):
            for env in container.get("env") or []:
                if contains_secret(env.get("value")):
                    violations.append(f"{resource.label} container {container.get('name')} has secret {env.get('name')} "
                                      "as a literal environment value; reference a Secret")
    return violations


def tensor_parallel_never_on_mig(resources: list[Resource]) -> list[str]:
    """A replica on a MIG slice runs one GPU's worth of vLLM (tensor parallel 1);
    a replica on whole GPUs requests exactly its tensor-parallel size."""
    violations = []
    for resource in resources:
        for container in containers(resource):
            args = container.get("args") or []
            if "--tensor-parallel-size" not in args:
                continue
            tp = int(args[args.index("--tensor-parallel-size") + 1])
            limits = (container.get("resources") or {}).get("limits") or {}
            mig = {k: v for k, v in limits.items() if k.startswith("nvidia.com/mig-")}
            if mig and (tp != 1 or list(mig.values()) != ["1"]):
                violations.append(f"{resource.label} runs tensor parallel {tp} on MIG slices {mig}")
            whole = limits.get("nvidia.com/gpu")
            if whole is not None and int(whole) != tp:
                violations.append(f"{resource.label} requests {whole} GPUs for tensor parallel {tp}")
    return violations
