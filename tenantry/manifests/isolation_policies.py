"""Each tenant's isolation level, proven from the objects a rendering would apply rather than from the Plan:
who the gateway lets reach each engine, what the engines' pods request and where they may run.

Engines admit only the gateway (policies.engines_reachable_only_from_gateway), and the gateway sends a
tenant's request only to a model its team allows; a fallback is followed only to a model the team allows
too. So a team's allowed models, mapped through the gateway's model list to the engine Services they call,
are every engine the tenant can reach.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any
from urllib.parse import urlparse

import yaml

from tenantry.configs.node_registration import DEDICATED_LABEL, POOL_LABEL, POOL_TAINT_KEY
from tenantry.deploy.common import DEDICATED_POD_LABEL
from tenantry.manifests.cluster_policies import NODE_PATCH
from tenantry.manifests.resources import Resource, containers, pod_templates, template_labels, workloads_by_name
from tenantry.plan.model import Plan


def tenants_get_the_isolation_they_were_promised(resources: list[Resource], plan: Plan) -> list[str]:
    from tenantry.deploy.gateway import NAME as GATEWAY_CONFIGMAP, RECONCILER_CONFIGMAP

    config_maps = {r.metadata.get("name"): r for r in resources if r.kind == "ConfigMap"}
    if GATEWAY_CONFIGMAP not in config_maps or RECONCILER_CONFIGMAP not in config_maps:
        return [f"no ConfigMap {GATEWAY_CONFIGMAP} or {RECONCILER_CONFIGMAP}: the gateway's routes cannot be read"]
    gateway_config = yaml.safe_load(config_maps[GATEWAY_CONFIGMAP].props["data"]["config.yaml"])
    teams = json.loads(config_maps[RECONCILER_CONFIGMAP].props["data"]["teams.json"])
    engine_of = {m["model_name"]: _engine_called(urlparse(m["litellm_params"]["api_base"]).hostname, plan)
                 for m in gateway_config["model_list"]}
    reach = {team["team_alias"]: {engine_of[m] for m in team["models"] if m in engine_of} for team in teams}
    reached_by: dict[str, set[str]] = defaultdict(set)
    for tenant, engines in reach.items():
        for engine in engines:
            reached_by[engine].add(tenant)
    deployments = workloads_by_name(resources)
    owners = {a.name: a.tenant for e in plan.engines for a in e.lora.adapters}

    violations = []
    for tenant in plan.tenants:
        team = next((t for t in teams if t["team_alias"] == tenant.name), None)
        if team is None:
            violations.append(f"tenant {tenant.name} has no team at the gateway")
            continue
        if tenant.isolation == "adapter":
            violations += [f"tenant {tenant.name} (isolation adapter) may call {m}, which is not one of its adapters"
                           for m in team["models"] if owners.get(m) != tenant.name]
        if tenant.isolation in ("mig", "dedicated-replica", "dedicated-node"):
            for engine in sorted(reach[tenant.name]):
                violations += _dedicated_engine(tenant.name, tenant.isolation, engine, reached_by[engine],
                                                deployments.get(engine))
        if tenant.isolation == "dedicated-node":
            pools = {p.name for p in plan.pools if p.dedicated_to == tenant.name}
            violations += _dedicated_pools(tenant.name, pools, resources)
    return violations


def _engine_called(host: str | None, plan: Plan) -> str:
    """The engine behind the host LiteLLM calls: its own Service (named after it) or, kv-aware, the Service Istio
    makes for the engine's Gateway."""
    from tenantry.deploy.kv_routing import gateway_service

    service = (host or "").split(".")[0]
    return next((e.name for e in plan.engines if e.routing and gateway_service(e) == service), service)


def _dedicated_engine(tenant: str, level: str, engine: str, reached_by: set[str],
                      deployment: Resource | None) -> list[str]:
    others = sorted(reached_by - {tenant})
    found = [f"engine {engine} of tenant {tenant} (isolation {level}) is reached by {', '.join(others)} too"
             ] if others else []
    if deployment is None:
        return [*found, f"engine {engine} of tenant {tenant} has no Deployment"]
    if template_labels(deployment).get(DEDICATED_POD_LABEL) != tenant:
        found.append(f"{deployment.label} serves tenant {tenant} alone but its pods are not labelled "
                     f"{DEDICATED_POD_LABEL}={tenant}")
    if level == "mig":
        requested = {k for c in containers(deployment)
                     for k in ((c.get("resources") or {}).get("limits") or {}) if k.startswith("nvidia.com/")}
        if not requested or any(not k.startswith("nvidia.com/mig-") for k in requested):
            found.append(f"{deployment.label} of tenant {tenant} (isolation mig) requests {sorted(requested)}, not a "
                         f"MIG slice")
    if level == "dedicated-node":
        for template in pod_templates(deployment):  # every stage's pods, across nodes
            selector = (template.get("spec") or {}).get("nodeSelector") or {}
            if selector.get(DEDICATED_LABEL) != tenant:
                found.append(f"{deployment.label} of tenant {tenant} (isolation dedicated-node) does not select nodes "
                             f"labelled {DEDICATED_LABEL}={tenant}: {selector}")
    return found


def _dedicated_pools(tenant: str, pools: set[str], resources: list[Resource]) -> list[str]:
    """Only the tenant's own pods tolerate its pools' taint (the pool taint keeps every other pod off), and the
    nodes tenantry labels there carry its label."""
    found = []
    for resource, spec in ((r, t.get("spec") or {}) for r in resources for t in pod_templates(r)):
        tolerated = {t.get("value") for t in spec.get("tolerations") or []
                     if t.get("key") == POOL_TAINT_KEY and t.get("operator") == "Equal"} & pools
        if tolerated and (spec.get("nodeSelector") or {}).get(DEDICATED_LABEL) != tenant:
            found.append(f"{resource.label} tolerates pool {', '.join(sorted(tolerated))}, dedicated to tenant "
                         f"{tenant}, without selecting its nodes ({DEDICATED_LABEL}={tenant})")
    for patch in (r for r in resources if r.type == NODE_PATCH):
        node_labels: dict[str, Any] = patch.metadata.get("labels") or {}
        if node_labels.get(POOL_LABEL) in pools and node_labels.get(DEDICATED_LABEL) != tenant:
            found.append(f"node {patch.metadata.get('name')} of pool {node_labels[POOL_LABEL]} is not labelled "
                         f"{DEDICATED_LABEL}={tenant}")
    return found
