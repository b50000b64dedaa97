"""What the program asks of the cluster itself: NodePatches that own their labels
and never the taint list (docs/decisions.md: Node taints come from registration,
labels from NodePatch), and autoscalers whose metrics API exists
(docs/decisions.md: The gateway's autoscaler reads metrics-server)."""

from __future__ import annotations

from tenantry.manifests.crd_policies import _created_before
from tenantry.manifests.resources import Resource
from tenantry.pins import chart
from tenantry.plan.model import Plan

NODE_PATCH = "kubernetes:core/v1:NodePatch"
RESOURCE_METRIC_TYPES = frozenset({"Resource", "ContainerResource"})
"""HorizontalPodAutoscaler metrics served by metrics.k8s.io."""


def node_patches_leave_taints_alone(resources: list[Resource]) -> list[str]:
    """Node.spec.taints is an atomic list under server-side apply: a NodePatch that sets it
    owns the whole list, so it conflicts with the kubelet or the cloud that registered the
    node's taints, and forced it removes them. Labels are owned key by key: forcing them
    takes over only tenantry's keys, so the first apply never fails on a label another
    manager (the GPU Operator's mig.config default) set first."""
    violations = []
    for resource in resources:
        if resource.type != NODE_PATCH:
            continue
        node = resource.metadata.get("name")
        if "taints" in (resource.props.get("spec") or {}):
            violations.append(f"NodePatch {node} sets spec.taints, an atomic list: it would take over or remove "
                              "the taints other managers set; register the node with its taint instead")
        if (resource.metadata.get("annotations") or {}).get("pulumi.com/patchForce") != "true":
            violations.append(f"NodePatch {node} does not force its labels: a label another manager set first "
                              "fails the apply with a conflict")
    return violations


def _scales_on_resource_metrics(resource: Resource) -> bool:
    metrics = (resource.props.get("spec") or {}).get("metrics") or []
    return any(m.get("type") in RESOURCE_METRIC_TYPES for m in metrics)


def autoscalers_have_a_metrics_api(resources: list[Resource], plan: Plan) -> list[str]:
    """An autoscaler on CPU or memory reads metrics.k8s.io: where the Plan installs
    metrics-server it waits for that release; where the cluster serves the API itself,
    no second metrics-server contends for the APIService v1beta1.metrics.k8s.io."""
    wanted = chart("metrics-server").chart
    installs = [r for r in resources if r.kind == "Release" and r.props.get("chart") == wanted]
    if plan.cluster.metrics_api == "present":
        return [f"Helm release {r.name} installs {wanted}, but cluster.metrics_api says the cluster serves "
                "metrics.k8s.io already: two would contend for the APIService v1beta1.metrics.k8s.io"
                for r in installs]
    by_urn = {r.urn: r for r in resources if r.urn}
    return [
        f"{r.label} scales on resource metrics but does not depend on the Helm release of {wanted}, "
        "which serves metrics.k8s.io"
        for r in resources
        if r.kind == "HorizontalPodAutoscaler" and _scales_on_resource_metrics(r)
        and not any(b.kind == "Release" and b.props.get("chart") == wanted for b in _created_before(r, by_urn))
    ]


def autoscaler_behaviour_in_range(resources: list[Resource]) -> list[str]:
    """Every HorizontalPodAutoscaler's behaviour, written directly or through a KEDA ScaledObject, is one the API
    server accepts: stabilizationWindowSeconds from 0 to 3600, each policy's periodSeconds above 0 and at most 1800
    (HPAScalingRules, HPAScalingPolicy). KEDA's CRD does not bound them: a ScaledObject out of range is accepted,
    and the HPA KEDA then writes for it is refused, so the engine never scales."""
    from tenantry.plan.autoscaling import HPA_MAX_PERIOD_SECONDS, SCALE_DOWN_CEILING_SECONDS

    found = []
    for r in resources:
        spec = r.props.get("spec") or {}
        if r.kind == "HorizontalPodAutoscaler":
            behaviour = spec.get("behavior") or {}
        elif r.kind == "ScaledObject":
            behaviour = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}
        else:
            continue
        for direction in ("scaleUp", "scaleDown"):
            rules = behaviour.get(direction) or {}
            window = rules.get("stabilizationWindowSeconds")
            if window is not None and not 0 <= window <= SCALE_DOWN_CEILING_SECONDS:
                found.append(f"{r.label} {direction}.stabilizationWindowSeconds is {window}: the API server accepts "
                             f"0 to {SCALE_DOWN_CEILING_SECONDS}")
            for policy in rules.get("policies") or []:
                period = policy.get("periodSeconds")
                if period is None or not 0 < period <= HPA_MAX_PERIOD_SECONDS:
                    found.append(f"{r.label} {direction} policy periodSeconds is {period}: the API server accepts "
                                 f"1 to {HPA_MAX_PERIOD_SECONDS}")
    return found


def service_monitors_find_their_targets(resources: list[Resource]) -> list[str]:
    """Every ServiceMonitor tenantry renders selects at least one Service it renders, by the Service's own labels
    (what Prometheus Operator matches, not the pods'), in the namespaces it names, and each endpoint's port is a
    named port of every Service it selects: a ServiceMonitor that selects nothing is valid and scrapes nothing,
    and the alerts on its metrics never fire."""
    from tenantry.manifests.resources import selects

    services = [r for r in resources if r.kind == "Service"]
    found = []
    for monitor in (r for r in resources if r.kind == "ServiceMonitor"):
        spec = monitor.props.get("spec") or {}
        names = (spec.get("namespaceSelector") or {}).get("matchNames") or [monitor.namespace]
        chosen = [s for s in services if s.namespace in names
                  and selects(spec.get("selector") or {}, s.metadata.get("labels") or {})]
        if not chosen:
            found.append(f"{monitor.label} selects no Service (labels {spec.get('selector')} in {names}): nothing "
                         f"is scraped")
            continue
        for endpoint in spec.get("endpoints") or []:
            for service in chosen:
                ports = [p.get("name") for p in (service.props.get("spec") or {}).get("ports") or []]
                if endpoint.get("port") not in ports:
                    found.append(f"{monitor.label} scrapes port {endpoint.get('port')!r}, which {service.label} "
                                 f"does not name (it has {ports})")
    return found
