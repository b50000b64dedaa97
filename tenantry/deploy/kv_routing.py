"""KV-aware routing for the engines that ask for it (`routing: kv-aware`, tenantry/plan/routing.py).

The request path: client -> LiteLLM (the tenant front door, unchanged) -> the engine's Gateway (Istio's
Gateway API implementation, a Deployment and Service Istio creates for the Gateway) -> the Gateway asks the
InferencePool's endpoint picker (llm-d's router, over ext-proc) which replica to use -> vLLM on that pod.

What is installed, only for a stack with such an engine:
- the CRDs the objects need, applied from the pinned files under crds/ (Gateway API's standard channel, the
  inference extension's InferencePool, llm-d's InferenceObjective): no pinned chart ships them;
- Istio's base (its own CRDs) and istiod charts, pinned, with the inference extension switched on;
- per engine: its InferencePool and endpoint picker with one InferenceObjective per tier
  (tenantry/deploy/endpoint_picker.py), a Gateway and an HTTPRoute to the pool, and the NetworkPolicies that let
  only LiteLLM reach the Gateway and only the Gateway and the picker reach the engine
  (docs/decisions.md: KV-aware routing is llm-d's endpoint picker behind one Istio Gateway per engine).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.configs.litellm import REQUEST_TIMEOUT_SECONDS
from tenantry.configs.vllm import PORT as ENGINE_PORT
from tenantry.deploy import gateway as gateway_mod
from tenantry.deploy.common import (ENGINE_LABEL, PROMETHEUS_POD_LABELS, chart_namespace, labels, pinned_release,
                                    service_monitor, waits_until)
from tenantry.deploy.endpoint_picker import (
    DESTINATION_RULE_API_VERSION,
    OBJECTIVE_API_VERSION,
    PICKER_METRICS_PORT,
    PICKER_PORT,
    POOL_API_VERSION,
    objective_specs,
    picker_config,
    picker_deployment_spec,
    picker_name,
    picker_rules,
    picker_selector,
    picker_service_spec,
    picker_tls_rule,
    pool_spec,
)
from tenantry.deploy.engine import engine_selector
from tenantry.pins import APPLIED_CRDS_DIR, chart, crd_file
from tenantry.plan.model import EnginePlan, Plan

ISTIO_BASE, ISTIOD = "istio-base", "istiod"
GATEWAY_CLASS = "istio"
GATEWAY_PORT = 80
GATEWAY_API_VERSION = "gateway.networking.k8s.io/v1"
GATEWAY_READY_CONDITION = "Programmed"
"""Gateway API's condition for a Gateway its implementation has deployed."""
GATEWAY_READY_SECONDS = 900
"""How long `pulumi up` waits for an engine's Gateway to be Programmed (Gateway API's condition: Istio has deployed
its proxy, a first pull of the proxy image included); LiteLLM, which calls it, waits for it."""
GATEWAY_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"
"""The label Istio puts on the pods it deploys for a Gateway (and selects them by)."""


def gateway_service(e: EnginePlan) -> str:
    """The Service Istio creates for the engine's Gateway: `<gateway>-<class>`."""
    assert e.routing is not None
    return f"{e.routing.gateway}-{GATEWAY_CLASS}"


SERVICE_TYPE_ANNOTATION = "networking.istio.io/service-type"
GATEWAY_ANNOTATIONS = {SERVICE_TYPE_ANNOTATION: "ClusterIP"}
"""On the Gateway's own metadata: Istio 1.30.3 gives the Service it creates for a Gateway of class `istio` its
class's default type, LoadBalancer (pilot/pkg/config/kube/gatewaycommon/classinfo.go), unless the Gateway's
annotations say otherwise (deploymentcontroller.go reads gw.Annotations only; spec.infrastructure.annotations are
copied onto the objects it creates and never read). The annotation is deprecated for
spec.infrastructure.routeability, which this Istio does not implement yet: the Gateway's status says so, and the
engines stay inside the cluster. tenantry offers no external entry to an engine: tenants reach engines only
through LiteLLM."""


def gateway_spec() -> dict[str, Any]:
    return {"gatewayClassName": GATEWAY_CLASS,
            "listeners": [{"name": "http", "protocol": "HTTP", "port": GATEWAY_PORT,
                           "allowedRoutes": {"namespaces": {"from": "Same"}}}]}


def route_spec(e: EnginePlan) -> dict[str, Any]:
    """Everything sent to the engine's Gateway goes to its pool, held as long as LiteLLM waits for an answer."""
    assert e.routing is not None
    return {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": e.routing.gateway}],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                        "name": e.routing.pool}],
                       "timeouts": {"request": f"{REQUEST_TIMEOUT_SECONDS}s"}}]}


@dataclass(frozen=True)
class KvRoutingArgs:
    plan: Plan
    namespace: str
    """The engines' namespace: pools, pickers, Gateways and routes live beside the engines they serve."""
    monitoring_namespace: str
    """Prometheus's namespace: it scrapes the pickers."""
    monitoring_release: pulumi.Resource
    """The release that installs the ServiceMonitor CRD."""


class KvRouting(pulumi.ComponentResource):
    def __init__(self, name: str, args: KvRoutingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:routing:KvRouting", name, None, opts)
        routed = [e for e in args.plan.engines if e.routing]
        self.urls = {e.name: f"http://{gateway_service(e)}.{args.namespace}.svc:{GATEWAY_PORT}/v1" for e in routed}
        self.gateways: list[pulumi.Resource] = []
        """The engines' Gateways, each ready once `pulumi up` has created it: LiteLLM waits for them."""
        if routed:
            crds = [k8s.apiextensions.v1.CustomResourceDefinition(
                        f"{name}-crd-{crd['metadata']['name']}", metadata=crd["metadata"], spec=crd["spec"],
                        opts=pulumi.ResourceOptions(parent=self)) for crd in applied_crds()]
            base_pin, istiod_pin = chart(ISTIO_BASE), chart(ISTIOD)
            # With the seccomp profile of charts/istiod/values.yaml, istiod meets the restricted profile.
            istio_ns = chart_namespace(f"{name}-istio-namespace", istiod_pin, "restricted", self)
            base = pinned_release(f"{name}-istio-base", base_pin, base_pin.values, self, [istio_ns])
            # istiod reads InferencePools from its start: their CRD first.
            istiod = pinned_release(f"{name}-istiod", istiod_pin, istiod_pin.values, self, [base, *crds])
            for e in routed:
                self._engine(f"{name}-{e.name}", e, args, [*crds, base, istiod])
        self.register_outputs({"engines": [e.name for e in routed]})

    def _engine(self, name: str, e: EnginePlan, args: KvRoutingArgs, needs: list[pulumi.Resource]) -> None:
        assert e.routing is not None
        ns, picker = args.namespace, picker_name(e)
        child = pulumi.ResourceOptions(parent=self)
        after = pulumi.ResourceOptions(parent=self, depends_on=needs)

        def meta(object_name: str) -> dict[str, Any]:
            return {"name": object_name, "namespace": ns, "labels": labels("routing", **{ENGINE_LABEL: e.name})}

        account = k8s.core.v1.ServiceAccount(f"{name}-picker-account", metadata=meta(picker), opts=child)
        role = k8s.rbac.v1.Role(f"{name}-picker-role", metadata=meta(picker), rules=picker_rules(), opts=child)
        k8s.rbac.v1.RoleBinding(
            f"{name}-picker-binding", metadata=meta(picker),
            subjects=[{"kind": "ServiceAccount", "name": picker, "namespace": ns}],
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": picker},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[account, role]))
        config = k8s.core.v1.ConfigMap(f"{name}-picker-config", metadata=meta(picker), data=picker_config(), opts=child)
        k8s.apps.v1.Deployment(f"{name}-picker", metadata=meta(picker), spec=picker_deployment_spec(e, ns),
                               opts=pulumi.ResourceOptions(parent=self, depends_on=[*needs, account, config]))
        # Labelled as its ServiceMonitor selects it: Prometheus Operator matches a Service's own labels.
        service_meta = {**meta(picker), "labels": {**meta(picker)["labels"], **picker_selector(e)}}
        k8s.core.v1.Service(f"{name}-picker-service", metadata=service_meta, spec=picker_service_spec(e), opts=child)
        service_monitor(f"{name}-picker-monitor", picker, ns, picker_selector(e), port="http-metrics", path="/metrics",
                        opts=child, crd_release=args.monitoring_release)
        custom = [("DestinationRule", DESTINATION_RULE_API_VERSION, picker, picker_tls_rule(e, ns)),
                  ("InferencePool", POOL_API_VERSION, e.routing.pool, pool_spec(e)),
                  *(("InferenceObjective", OBJECTIVE_API_VERSION, n, spec) for n, spec in objective_specs(e).items()),
                  ("Gateway", GATEWAY_API_VERSION, e.routing.gateway, gateway_spec()),
                  ("HTTPRoute", GATEWAY_API_VERSION, e.routing.gateway, route_spec(e))]
        for kind, api_version, object_name, spec in custom:
            metadata = {**meta(object_name), **({"annotations": {**GATEWAY_ANNOTATIONS, **waits_until(
                GATEWAY_READY_CONDITION, GATEWAY_READY_SECONDS)}} if kind == "Gateway" else {})}
            made = k8s.apiextensions.CustomResource(f"{name}-{kind.lower()}-{object_name}", api_version=api_version,
                                                    kind=kind, metadata=metadata, spec=spec, opts=after)
            if kind == "Gateway":
                self.gateways.append(made)
        for policy in routing_policies(e, args.monitoring_namespace):
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy['metadata']['name']}", metadata={**policy["metadata"], "namespace": ns},
                spec=policy["spec"], opts=child)


def routing_policies(e: EnginePlan, monitoring_namespace: str) -> list[dict[str, Any]]:
    """Who may reach what on the kv-aware path: LiteLLM the Gateway's pods; the Gateway's pods the picker and the
    engine's serving pods; the picker the engine's pods too (it reads their /metrics); Prometheus the picker's
    metrics. Nothing else: tenants reach only LiteLLM."""
    assert e.routing is not None
    gateway_pods = {"podSelector": {"matchLabels": {GATEWAY_NAME_LABEL: e.routing.gateway}}}
    picker_pods = {"podSelector": {"matchLabels": picker_selector(e)}}
    litellm = {"podSelector": {"matchLabels": gateway_mod.SELECTOR}}
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring_namespace}},
                  "podSelector": {"matchLabels": PROMETHEUS_POD_LABELS}}

    def policy(suffix: str, selector: dict[str, str], ingress: list[dict[str, Any]]) -> dict[str, Any]:
        return {"metadata": {"name": f"{e.name}-{suffix}", "labels": labels("routing")},
                "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"], "ingress": ingress}}

    return [
        policy("inference-gateway", {GATEWAY_NAME_LABEL: e.routing.gateway},
               [{"from": [litellm], "ports": [{"protocol": "TCP", "port": GATEWAY_PORT}]}]),
        policy("picker", picker_selector(e),
               [{"from": [gateway_pods], "ports": [{"protocol": "TCP", "port": PICKER_PORT}]},
                {"from": [prometheus], "ports": [{"protocol": "TCP", "port": PICKER_METRICS_PORT}]}]),
        policy("routed", engine_selector(e.name),
               [{"from": [gateway_pods, picker_pods], "ports": [{"protocol": "TCP", "port": ENGINE_PORT}]}]),
    ]


def applied_crds() -> list[dict[str, Any]]:
    """The CRDs tenantry applies itself, from the pinned files (crds/), each exactly as its release ships it."""
    return [copy.deepcopy(crd_file(path)) for path in sorted(APPLIED_CRDS_DIR.glob("*/*.yaml"))]
