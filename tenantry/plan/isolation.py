"""Each tenant's isolation level, checked against the engines and pools that would serve it, and the
engines and pools it dedicates to one tenant.

A tenant reaches an engine by listing it, by listing an adapter it serves, or through the gateway's
fallbacks from one of those (its key is allowed every engine a fallback may send it to). The levels:
- shared: nothing to check (co-batched with others; its own cache salt is the spec's cache field);
- adapter: only its own adapters on a shared base: no base model listed, none reached through a fallback;
- mig: every engine it reaches runs on MIG slices, and no other tenant reaches any of them;
- dedicated-replica: no other tenant reaches any engine it reaches;
- dedicated-node: as dedicated-replica, and every engine on those engines' pools is one of them.
A refusal names the tenant's isolation field (or its models, for adapter) and what breaks the promise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from tenantry.plan.model import EnginePlan, PoolPlan
from tenantry.plan.notes import Notes
from tenantry.plan.tenants import FallbackGraph
from tenantry.spec.schema import Spec, TenantSpec

DEDICATED_ENGINES = ("mig", "dedicated-replica", "dedicated-node")
"""Levels whose engines serve the tenant alone."""


def plan_isolation(
    spec: Spec, engines: tuple[EnginePlan, ...], pools: tuple[PoolPlan, ...], notes: Notes
) -> tuple[tuple[EnginePlan, ...], tuple[PoolPlan, ...]]:
    """The engines and pools with what they dedicate to one tenant; a refusal for each promise they break."""
    fallbacks = FallbackGraph.of(spec)
    reach = {t.name: fallbacks.reaches(t) for t in spec.tenants}
    reached_by: dict[str, list[str]] = defaultdict(list)
    for tenant, names in reach.items():
        for name in names:
            reached_by[name].append(tenant)
    by_name = {e.name: e for e in engines}
    on_pool: dict[str, list[str]] = defaultdict(list)
    for engine in engines:
        on_pool[engine.pool].append(engine.name)

    dedicated: dict[str, str] = {}
    dedicated_pools: dict[str, str] = {}
    for i, tenant in enumerate(spec.tenants):
        path = f"tenants[{i}].isolation"
        level, mine = tenant.isolation, reach[tenant.name]
        if level == "adapter":
            _check_adapter_only(tenant, i, fallbacks, notes)
        if level not in DEDICATED_ENGINES:
            continue
        for name in mine:
            others = [t for t in reached_by[name] if t != tenant.name]
            if others:
                notes.refuse(path, f"isolation '{level}' promises {tenant.name} engines no other tenant reaches: "
                             f"engine {name} is reached by {', '.join(others)} too (through their models, adapters "
                             f"or the gateway's fallbacks)")
            dedicated.setdefault(name, tenant.name)
        if level == "mig":
            for name in mine:
                if by_name[name].placement != "mig":
                    notes.refuse(path, f"isolation 'mig' needs every engine {tenant.name} reaches on MIG slices: "
                                 f"engine {name} runs on {_placement(by_name[name])} in pool {by_name[name].pool}")
        if level == "dedicated-node":
            for pool in dict.fromkeys(by_name[name].pool for name in mine):
                strangers = [e for e in on_pool[pool] if e not in mine]
                if strangers:
                    notes.refuse(path, f"isolation 'dedicated-node' needs pool {pool} for {tenant.name} alone: it "
                                 f"also runs engine(s) {', '.join(strangers)}; place them on another pool")
                dedicated_pools.setdefault(pool, tenant.name)

    engines = tuple(replace(e, dedicated_to=dedicated.get(e.name), dedicated_nodes=e.pool in dedicated_pools
                            and dedicated.get(e.name) == dedicated_pools[e.pool]) for e in engines)
    pools = tuple(replace(p, dedicated_to=dedicated_pools.get(p.name)) for p in pools)
    return engines, pools


def _check_adapter_only(tenant: TenantSpec, index: int, fallbacks: FallbackGraph, notes: Notes) -> None:
    """Only its own adapters (the spec already refuses another tenant's): no base model it could call itself."""
    if not tenant.adapters:
        notes.refuse(f"tenants[{index}].isolation", f"isolation 'adapter' serves {tenant.name} only through its own "
                     f"adapters, and it lists none")
    if tenant.models:
        notes.refuse(f"tenants[{index}].models", f"isolation 'adapter' serves {tenant.name} only through its own "
                     f"adapters: it may not call base model(s) {', '.join(tenant.models)}; list its adapters only, or "
                     f"choose isolation shared")
    through_fallbacks = fallbacks.reachable_from(tenant)
    if through_fallbacks:
        notes.refuse(f"tenants[{index}].isolation", f"isolation 'adapter' serves {tenant.name} only through its own "
                     f"adapters, but the gateway's fallbacks allow its key base model(s) "
                     f"{', '.join(through_fallbacks)}; drop those fallbacks or choose isolation shared")


def _placement(engine: EnginePlan) -> str:
    if engine.placement == "gpus":
        return f"{engine.tensor_parallel} whole GPU(s)"
    return "CPU" if engine.placement == "cpu" else f"MIG slice {engine.mig_profile}"
