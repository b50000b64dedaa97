"""Each engine is reached the way the Plan says, proven from the objects a rendering would apply: through its
Service, or (`routing: kv-aware`) through its own Gateway, whose route sends to an InferencePool of exactly the
engine's serving pods, picked by a picker of that pool, with the Plan's objective for every tier
(docs/decisions.md: KV-aware routing is llm-d's endpoint picker behind one Istio Gateway per engine)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import yaml

from tenantry.manifests.resources import Resource, containers, pod_templates, selects
from tenantry.plan.model import EnginePlan, Plan


def engines_are_routed_as_planned(resources: list[Resource], plan: Plan) -> list[str]:
    from tenantry.deploy.engine import api_service_name, serving_selector
    from tenantry.deploy.gateway import NAME as GATEWAY_CONFIGMAP
    from tenantry.deploy.kv_routing import gateway_service

    config = next((r for r in resources if r.kind == "ConfigMap" and r.metadata.get("name") == GATEWAY_CONFIGMAP), None)
    if config is None:
        return [f"no ConfigMap {GATEWAY_CONFIGMAP}: the gateway's routes cannot be read"]
    called = {m["model_info"]["base_engine"]: urlparse(m["litellm_params"]["api_base"]).hostname
              for m in yaml.safe_load(config.props["data"]["config.yaml"])["model_list"]}
    pools = [r for r in resources if r.kind == "InferencePool"]
    violations = []
    for e in plan.engines:
        host = (called.get(e.name) or "").split(".")[0]
        selecting = [p for p in pools if selects((p.props.get("spec") or {}).get("selector") or {}, serving_selector(e))]
        if e.routing is None:
            if host != api_service_name(e):
                violations.append(f"engine {e.name} routes through its Service {api_service_name(e)}, but LiteLLM "
                                  f"calls {host!r}")
            violations += [f"engine {e.name} routes through its Service, but InferencePool {p.metadata.get('name')} "
                           f"selects its pods" for p in selecting]
            continue
        if host != gateway_service(e):
            violations.append(f"engine {e.name} is kv-aware, but LiteLLM calls {host!r}, not its Gateway's Service "
                              f"{gateway_service(e)!r}")
        violations += _pool_as_planned(e, resources, selecting)
    return violations


def _pool_as_planned(e: EnginePlan, resources: list[Resource], selecting: list[Resource]) -> list[str]:
    from tenantry.configs.vllm import PORT
    from tenantry.deploy.engine import api_service_name, serving_selector

    assert e.routing is not None
    pool = next((p for p in selecting if p.metadata.get("name") == e.routing.pool), None)
    if pool is None:
        return [f"engine {e.name} is kv-aware, but no InferencePool {e.routing.pool} selects its serving pods"]
    spec = pool.props.get("spec") or {}
    violations = []
    if (spec.get("selector") or {}).get("matchLabels") != serving_selector(e):
        violations.append(f"InferencePool {e.routing.pool} selects {spec.get('selector')}, not exactly the serving "
                          f"pods of {e.name} ({serving_selector(e)})")
    if [p.get("number") for p in spec.get("targetPorts") or []] != [PORT]:
        violations.append(f"InferencePool {e.routing.pool} targets ports {spec.get('targetPorts')}, not vLLM's {PORT}")
    violations += _picker_reads_the_pool(e, resources, spec.get("endpointPickerRef") or {})
    violations += _routes_send_to_the_pool(e, resources)
    violations += _objectives_as_planned(e, resources)
    return violations


def _picker_reads_the_pool(e: EnginePlan, resources: list[Resource], ref: dict[str, Any]) -> list[str]:
    assert e.routing is not None
    service = next((r for r in resources if r.kind == "Service" and r.metadata.get("name") == ref.get("name")), None)
    if service is None:
        return [f"InferencePool {e.routing.pool}'s endpoint picker Service {ref.get('name')!r} is not rendered"]
    selector = {"matchLabels": (service.props.get("spec") or {}).get("selector") or {}}
    pickers = [r for r in resources if r.kind == "Deployment" and any(
        selects(selector, (t.get("metadata") or {}).get("labels") or {}) for t in pod_templates(r))]
    reading = [d for d in pickers for c in containers(d)
               if _flag(c.get("args") or [], "--pool-name") == e.routing.pool]
    if len(pickers) != 1 or len(reading) != 1:
        return [f"InferencePool {e.routing.pool}'s picker Service {ref.get('name')} selects {len(pickers)} "
                f"Deployment(s), {len(reading)} of them picking for that pool (--pool-name)"]
    return []


def istio_gateway(r: Resource) -> bool:
    """A Gateway API Gateway of Istio's class (not a Pulumi component that happens to be called Gateway)."""
    from tenantry.deploy.kv_routing import GATEWAY_API_VERSION, GATEWAY_CLASS

    return (r.kind == "Gateway" and r.props.get("apiVersion") == GATEWAY_API_VERSION
            and (r.props.get("spec") or {}).get("gatewayClassName") == GATEWAY_CLASS)


def istio_gateway_service_type(gateway: Resource) -> str:
    """The type of the Service Istio 1.30.3 creates for a Gateway of its class: the Gateway's own
    networking.istio.io/service-type annotation, else LoadBalancer (tenantry/deploy/kv_routing.GATEWAY_ANNOTATIONS)."""
    from tenantry.deploy.kv_routing import SERVICE_TYPE_ANNOTATION

    return (gateway.metadata.get("annotations") or {}).get(SERVICE_TYPE_ANNOTATION, "LoadBalancer")


def _routes_send_to_the_pool(e: EnginePlan, resources: list[Resource]) -> list[str]:
    from tenantry.deploy.kv_routing import GATEWAY_CLASS

    assert e.routing is not None
    gateway = next((r for r in resources if r.kind == "Gateway" and r.metadata.get("name") == e.routing.gateway), None)
    if gateway is None:
        return [f"engine {e.name} is kv-aware, but its Gateway {e.routing.gateway} is not rendered"]
    spec = gateway.props.get("spec") or {}
    violations = []
    if spec.get("gatewayClassName") != GATEWAY_CLASS:
        violations.append(f"Gateway {e.routing.gateway} is of class {spec.get('gatewayClassName')!r}, not {GATEWAY_CLASS}")
    if (service_type := istio_gateway_service_type(gateway)) != "ClusterIP":
        violations.append(f"Gateway {e.routing.gateway}'s Service would be {service_type}, not ClusterIP: the engine "
                          f"would leave the cluster")
    routes = [r for r in resources if r.kind == "HTTPRoute" and any(
        p.get("name") == e.routing.gateway for p in (r.props.get("spec") or {}).get("parentRefs") or [])]
    backends = [b for r in routes for rule in (r.props.get("spec") or {}).get("rules") or []
                for b in rule.get("backendRefs") or []]
    if not routes or backends != [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                   "name": e.routing.pool}] * len(routes):
        violations.append(f"Gateway {e.routing.gateway}'s routes send to {backends}, not only InferencePool "
                          f"{e.routing.pool}")
    return violations


def _objectives_as_planned(e: EnginePlan, resources: list[Resource]) -> list[str]:
    assert e.routing is not None
    found = {r.metadata.get("name"): r.props.get("spec") or {} for r in resources if r.kind == "InferenceObjective"
             and ((r.props.get("spec") or {}).get("poolRef") or {}).get("name") == e.routing.pool}
    wanted = {o.name: o.priority for o in e.routing.objectives}
    got = {name: spec.get("priority") for name, spec in found.items()}
    if got != wanted:
        return [f"InferencePool {e.routing.pool}'s objectives are {got}, the Plan's {wanted}"]
    return []


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args[:-1] else None
