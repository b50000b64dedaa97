"""Each tenant's plan: its contract, its cache salt, its traffic, and the engines it may fall back to."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.plan.model import TenantPlan, TrafficPlan
from tenantry.plan.notes import Notes
from tenantry.plan.routes import Route
from tenantry.plan.slots import concurrency_share
from tenantry.spec.resolve import cache_salt
from tenantry.spec.schema import Spec, TenantSpec


def plan_tenant(
    spec: Spec, tenant: TenantSpec, mine: list[Route], reserved_slots: int, fallbacks: FallbackGraph,
    gpu_resources: tuple[str, ...],
) -> TenantPlan:
    policy = spec.tiers.policy(tenant.tier)
    traffic = tuple(
        TrafficPlan(
            target=r.target, engine=r.engine, adapter=r.adapter, share=r.share, profile=r.profile,
            tpm=round(tenant.tpm * r.share), concurrency=concurrency_share(tenant.max_concurrency, r.share),
        )
        for r in mine
    )
    return TenantPlan(
        name=tenant.name,
        tier=tenant.tier,
        priority=policy.priority,
        namespace=f"tenant-{tenant.name}",
        models=tuple(tenant.models),
        adapters=tuple(tenant.adapters),
        overload_fallback=tuple(tenant.overload_fallback),
        fallback_models=fallbacks.reachable_from(tenant),
        tpm=tenant.tpm,
        rpm=tenant.rpm,
        max_concurrency=tenant.max_concurrency,
        budget_usd=tenant.budget.usd,
        budget_window=tenant.budget.window,
        budget_alert_at=tuple(tenant.budget.alert_at),
        budget_mode=tenant.budget.mode,
        gateway_max_budget_usd=tenant.budget.usd * (SHOWBACK_RUNAWAY_FACTOR if tenant.budget.mode == "showback" else 1),
        cache_isolation=tenant.cache.isolation,
        cache_salt=cache_salt(tenant),
        isolation=tenant.isolation,
        ttft_p95_ms=tenant.slo.ttft_p95_ms,
        itl_p95_ms=tenant.slo.itl_p95_ms,
        max_error_rate=tenant.slo.max_error_rate,
        typical_prompt_tokens=tenant.typical.prompt_tokens,
        typical_output_tokens=tenant.typical.output_tokens,
        contract_requests_per_second=min(
            tenant.rpm, tenant.tpm / (tenant.typical.prompt_tokens + tenant.typical.output_tokens)) / 60,
        max_prompt_tokens=policy.max_prompt_tokens,
        max_output_tokens=policy.max_output_tokens,
        reserved_slots=reserved_slots,
        traffic=traffic,
        quota_cpu=tenant.namespace_quota.cpu,
        quota_memory_bytes=int(tenant.namespace_quota.memory_gib * 2**30),
        quota_pods=tenant.namespace_quota.pods,
        quota_gpu_resources=gpu_resources,
    )


SHOWBACK_RUNAWAY_FACTOR = 1000
"""A showback tenant's gateway cap, in budgets: spend is recorded and alerted on as it passes the budget, and
only a runaway client is refused. LiteLLM needs a finite cap to report the budget gauges the alerts read
(it reports an unset one as infinite remaining; docs/decisions.md: Showback is a budget the gateway does not
enforce)."""

GUARANTEED_TENANTS_WARNING = 0.5
"""More than this share of the tenants guaranteed gets a warning (docs/decisions.md: Guarantees are for the few)."""


def warn_guarantees_for_most(spec: Spec, notes: Notes) -> None:
    """A guarantee is a promise that other traffic yields: when most tenants hold one, there is little left to
    yield, and their reservations split the engines into slots that idle while their owners are quiet."""
    guaranteed = [t.name for t in spec.tenants if t.tier == "guaranteed"]
    if len(spec.tenants) > 1 and len(guaranteed) > GUARANTEED_TENANTS_WARNING * len(spec.tenants):
        notes.warn(
            "tenants",
            f"{len(guaranteed)} of {len(spec.tenants)} tenants are guaranteed ({', '.join(guaranteed)}): a guarantee "
            f"holds because other traffic yields to it, and here little does; keep guaranteed for the tenants whose "
            f"SLO is contractual and make the rest best-effort",
        )


@dataclass(frozen=True, kw_only=True)
class FallbackGraph:
    """The gateway's fallbacks and each adapter's base engine, built once for all tenants."""

    to: dict[str, list[str]]
    base_of: dict[str, str]

    @staticmethod
    def of(spec: Spec) -> FallbackGraph:
        return FallbackGraph(
            to={f.model: f.to for f in spec.gateway.fallbacks},
            base_of={a.name: e.name for e in spec.engines for a in e.adapters},
        )

    def calls(self, tenant: TenantSpec) -> tuple[str, ...]:
        """The engines the tenant calls itself: its models and its adapters' base engines, in spec order."""
        return tuple(dict.fromkeys([*tenant.models, *(self.base_of[a] for a in tenant.adapters if a in self.base_of)]))

    def reachable_from(self, tenant: TenantSpec) -> tuple[str, ...]:
        """Every engine reachable through fallbacks from the engines the tenant
        calls (its adapters' base engines included), that it is not allowed already."""
        return _closure(self.to, set(self.calls(tenant)))

    def reaches(self, tenant: TenantSpec) -> tuple[str, ...]:
        """Every engine the tenant's requests can land on: those it calls, and those its fallbacks lead to."""
        return (*self.calls(tenant), *self.reachable_from(tenant))


def _closure(to: dict[str, list[str]], start: set[str]) -> tuple[str, ...]:
    seen: list[str] = []
    frontier = sorted(start)
    while frontier:
        engine = frontier.pop(0)
        for target in to.get(engine, []):
            if target not in start and target not in seen:
                seen.append(target)
                frontier.append(target)
    return tuple(seen)
