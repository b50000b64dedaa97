"""Where each tenant's traffic lands (one Route per tenant and target: an engine, or an adapter on
one) and what it brings to each engine: concurrency and a typical context."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from tenantry.plan.slots import Demand, concurrency_share
from tenantry.spec.schema import Spec, TenantSpec, TrafficProfile


@dataclass(frozen=True, kw_only=True)
class Route:
    """One tenant's traffic to one target."""

    tenant: TenantSpec
    target: str
    engine: str
    adapter: str | None
    share: float
    profile: TrafficProfile


def routes(spec: Spec) -> list[Route]:
    """The tenant's traffic shares, or an even chat split over everything it may call."""
    adapter_engine = {a.name: e.name for e in spec.engines for a in e.adapters}
    found = []
    for tenant in spec.tenants:
        shares: list[tuple[str, float, TrafficProfile]]
        if tenant.traffic is not None:
            shares = [(s.target, s.share, s.profile) for s in tenant.traffic]
        else:
            allowed = list(dict.fromkeys(tenant.models + tenant.adapters))
            shares = [(target, 1 / len(allowed), "chat") for target in allowed]
        for target, share, profile in shares:
            adapter = target if target in adapter_engine else None
            engine = adapter_engine[target] if adapter else target
            found.append(
                Route(tenant=tenant, target=target, engine=engine, adapter=adapter, share=share, profile=profile)
            )
    return found


def group_routes(found: list[Route], by: Literal["engine", "tenant"]) -> dict[str, list[Route]]:
    """Routes by engine name (`by="engine"`) or by tenant name (`by="tenant"`), in spec order."""
    grouped: dict[str, list[Route]] = defaultdict(list)
    for route in found:
        grouped[route.engine if by == "engine" else route.tenant.name].append(route)
    return grouped


def demands(found: list[Route]) -> list[Demand]:
    """Each tenant's concurrency on one engine, from its routes there."""
    share_by_tenant: dict[str, float] = defaultdict(float)
    tenants: dict[str, TenantSpec] = {}
    for route in found:
        share_by_tenant[route.tenant.name] += route.share
        tenants[route.tenant.name] = route.tenant
    return [
        Demand(
            tenant=name, tier=tenants[name].tier,
            concurrency=concurrency_share(tenants[name].max_concurrency, share),
        )
        for name, share in share_by_tenant.items()
    ]


def typical_context(found: list[Route], engine_demands: list[Demand], otherwise: int) -> int:
    """Prompt + output of the tenants routed to one engine, weighted by their concurrency there;
    `otherwise` (the engine's max context) when nobody is."""
    weight_sum = sum(d.concurrency for d in engine_demands)
    if not weight_sum:
        return otherwise
    context_by_tenant = {r.tenant.name: r.tenant.typical.prompt_tokens + r.tenant.typical.output_tokens for r in found}
    return round(sum(d.concurrency * context_by_tenant[d.tenant] for d in engine_demands) / weight_sum)
