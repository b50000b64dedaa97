"""Recording rules: what alerts and dashboards share, computed once.

Each tenant's objectives are recorded too, as constant series
(`tenantry:tenant_objective:*`), so that one alert rule compares every
tenant with its own contract and a dashboard draws the target next to the
measure, from the numbers the Plan decided.

LiteLLM names a tenant `team_alias` (the team tenantry's reconciler creates
per tenant); the records rename it `tenant`, as the plugin's metrics call it.
"""

from __future__ import annotations

from typing import Any

from tenantry.plan.model import Plan, TenantPlan

TENANT_KEYS = "tenant, tier, engine"
"""The plugin's per-tenant labels: each tenant's series are per engine that served it."""
BURN_WINDOWS = ("2m", "5m", "10m", "30m", "1h", "2h", "6h", "1d", "3d")
"""The windows of the burn-rate pairs (tenantry/monitoring/rules.py: FAST_BURNS, SLOW_BURNS, ERROR_BURNS)."""
ERROR_WINDOWS = ("5m", "10m", "30m", "1h", "6h")
"""The windows of the error-rate pairs, and the dashboard's 10 minutes."""
LONG_WINDOWS = ("1d", "3d")
"""Evaluated once a minute: a three-day rate every few seconds costs much and moves little."""
GUARANTEED_MAX_THROTTLED_RATIO = 0.01
"""A guaranteed tenant refused with a 429 for more than 1 % of its requests is not getting what it bought."""
BUDGET_LEVELS = ("info", "warning", "critical")
"""TenantBudgetSpent's severity at each of the tenant's `budget.alert_at` shares, in order."""
ERROR_STATUS = "5..|408"
"""Answers counted against a tenant's max_error_rate: server errors and timeouts (its own 4xx and 429s are not)."""


def from_team(expr: str) -> str:
    """A LiteLLM series with its `team_alias` copied to `tenant`."""
    return f'label_replace({expr}, "tenant", "$1", "team_alias", "(.+)")'


BUDGET_RESET = "tenantry:tenant_budget_reset:timestamp"
BUDGET_UPDATED = "tenantry:tenant_budget_updated:timestamp"
_SPENT_ON_REPLICA = f"sum by (tenant, instance) ({from_team('increase(litellm_spend_metric_total[2m])')}) > 0"
"""A gateway replica that served the tenant in the last 2 minutes: it has just set the tenant's budget gauges."""


def budget_freshness() -> list[dict[str, Any]]:
    """When each gateway replica's budget gauges were set, and until when they hold. LiteLLM sets a team's gauges
    on the replica that served it, at each request that spent (litellm_spend_metric_total rose), and never after:
    a replica that has not served since keeps the cap and the spend of then (issue 35, item 9: a 95 % page
    outlived the window's reset, and a budget lowered on one replica was read against another's old cap). Both
    are latched while the replica spends and kept between (each rule reads its own last value): the time, and
    the end of the window the gauges belong to (now plus the hours to the reset they report)."""
    return [
        _record(BUDGET_UPDATED, f"timestamp({_SPENT_ON_REPLICA})\nor {BUDGET_UPDATED}"),
        _record(BUDGET_RESET, f"(\n  time() + 3600 * max by (tenant, instance) "
                              f"({from_team('litellm_team_budget_remaining_hours_metric')})\n"
                              f"    and on (tenant, instance) ({_SPENT_ON_REPLICA})\n)\nor {BUDGET_RESET}"),
    ]


def budget_spent() -> dict[str, Any]:
    """The share of its budget a tenant has spent, from one replica's gauges, never mixed across replicas: spent is
    that replica's cap less what it has left, over its cap (chargeback) or the Plan's budget (showback, whose cap
    is a runaway guard far above it). Of the replicas still in their window, the one that served last; where no
    replica has been seen spending since Prometheus started, the largest share."""
    spent = (f"(\n    max by (tenant, instance) ({from_team('litellm_team_max_budget_metric')} > 0)\n"
             f"    - min by (tenant, instance) ({from_team('litellm_remaining_team_budget_metric')})\n  )")
    share = (f"(\n  {spent}\n  / on (tenant) group_left max by (tenant) "
             f'(tenantry:tenant_objective:budget_usd{{mode="showback"}})\n'
             f"  or {spent}\n  / max by (tenant, instance) ({from_team('litellm_team_max_budget_metric')} > 0)\n)\n"
             f"unless on (tenant, instance) ({BUDGET_RESET} < time())")
    latest = f"{BUDGET_UPDATED} == on (tenant) group_left max by (tenant) ({BUDGET_UPDATED})"
    return _record("tenantry:tenant_budget_spent:ratio",
                   f"max by (tenant) (\n  ({share}) and on (tenant, instance) ({latest})\n"
                   f"  or ({share}) unless on (tenant) {BUDGET_UPDATED}\n)")


def _record(name: str, expr: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"record": name, "expr": expr, **({"labels": labels} if labels else {})}


def objective_records(plan: Plan) -> list[dict[str, Any]]:
    """Each tenant's contract as constant series labelled with its tenant and tier."""
    records: list[dict[str, Any]] = []
    for t in plan.tenants:
        who = {"tenant": t.name, "tier": t.tier}
        records += [
            _record("tenantry:tenant_objective:ttft_seconds", f"vector({t.ttft_p95_ms / 1000:g})", who),
            _record("tenantry:tenant_objective:itl_seconds", f"vector({t.itl_p95_ms / 1000:g})", who),
            _record("tenantry:tenant_objective:max_error_rate", f"vector({t.max_error_rate:g})", who),
            *_budget_objectives(t, who),
        ]
        if t.tier == "guaranteed":
            records.append(_record("tenantry:tenant_objective:max_throttled_ratio",
                                   f"vector({GUARANTEED_MAX_THROTTLED_RATIO:g})", who))
    return records


def _budget_objectives(tenant: TenantPlan, who: dict[str, str]) -> list[dict[str, Any]]:
    if tenant.budget_usd <= 0:
        return []
    return [
        _record("tenantry:tenant_objective:budget_usd", f"vector({tenant.budget_usd:g})",
                {**who, "mode": tenant.budget_mode}),
        *(_record("tenantry:tenant_objective:budget_alert_share", f"vector({share:g})",
                  {**who, "level": level, "threshold": f"{share:g}"})
          for level, share in zip(BUDGET_LEVELS, tenant.budget_alert_at, strict=True)),
    ]


def _latency_percentiles() -> list[dict[str, Any]]:
    return [
        _record(f"tenantry:tenant_{measure}_seconds:p{q}_5m",
                f"histogram_quantile(0.{q}, sum by ({TENANT_KEYS}, le) (rate(tenantry_tenant_{measure}_seconds_bucket[5m])))")
        for measure in ("ttft", "itl") for q in ("50", "95")
    ]


def slo_miss_ratio(window: str) -> dict[str, Any]:
    """Of a tenant's requests on an engine, the share that missed an objective (ttft, itl, or any)."""
    return _miss_ratio("tenantry:tenant_slo_miss_ratio", TENANT_KEYS, window)


def slo_burn(window: str) -> dict[str, Any]:
    """Of a tenant's requests on all its engines, the share that missed an objective: what its budget burns on
    (a fallback engine's trickle is weighed with the rest, not paged alone)."""
    return _miss_ratio("tenantry:tenant_slo_burn", "tenant, tier", window)


def _miss_ratio(name: str, keys: str, window: str) -> dict[str, Any]:
    return _record(
        f"{name}:rate{window}",
        f"sum by ({keys}, objective) (rate(tenantry_tenant_slo_misses_total[{window}]))\n"
        f"  / ignoring (objective) group_left\n"
        f"sum by ({keys}) (rate(tenantry_tenant_requests_total[{window}]))")


def tenant_requests(window: str) -> dict[str, Any]:
    """A tenant's completed requests in a window, the traffic its burn rate is judged on."""
    return _record(f"tenantry:tenant_requests:increase{window}",
                   f"sum by (tenant, tier) (increase(tenantry_tenant_requests_total[{window}]))")


def _answers(window: str) -> dict[str, Any]:
    """A tenant's answers from the gateway in a window, its own 429s aside: the traffic its error rate is judged
    on."""
    answered = "increase(litellm_proxy_total_requests_metric_total{status_code!=\"429\"}[" + window + "])"
    return _record(f"tenantry:tenant_answers:increase{window}", f"sum by (tenant) ({from_team(answered)})")


def _gateway_ratio(name: str, selected: str, of: str, window: str = "10m") -> dict[str, Any]:
    """Per tenant, the share of the gateway's answers matching `selected` among those matching `of`."""
    total = "litellm_proxy_total_requests_metric_total"
    return _record(name, f"sum by (tenant) ({from_team(f'rate({total}{selected}[{window}])')})\n"
                         f"  / sum by (tenant) ({from_team(f'rate({total}{of}[{window}])')})")


def _tenant_records() -> list[dict[str, Any]]:
    tokens = " or ".join(
        f'label_replace(rate(litellm_{metric}_tokens_metric_total[5m]), "direction", "{direction}", "", "")'
        for metric, direction in (("input", "prompt"), ("output", "output")))
    return [
        *_latency_percentiles(),
        *(slo_miss_ratio(w) for w in BURN_WINDOWS if w not in LONG_WINDOWS),
        *(slo_burn(w) for w in BURN_WINDOWS if w not in LONG_WINDOWS),
        *(tenant_requests(w) for w in BURN_WINDOWS if w not in LONG_WINDOWS),
        _record("tenantry:tenant_goodput:rate5m",
                f"sum by ({TENANT_KEYS}) (rate(tenantry_tenant_requests_total[5m]))\n"
                f'  - sum by ({TENANT_KEYS}) (rate(tenantry_tenant_slo_misses_total{{objective="any"}}[5m]))'),
        _record("tenantry:tenant_tokens:rate5m", f"sum by (tenant, direction) ({from_team(f'({tokens})')})"),
        _record("tenantry:tenant_spend_usd:rate1h", f"sum by (tenant) ({from_team('rate(litellm_spend_metric_total[1h])')})"),
        _record("tenantry:tenant_prefix_cache_reuse:ratio_rate1h",
                f"sum by ({TENANT_KEYS}) (rate(tenantry_tenant_cached_prompt_tokens_total[1h]))\n"
                f"  / sum by ({TENANT_KEYS}) (rate(tenantry_tenant_prompt_tokens_total[1h]))"),
        *(_gateway_ratio(f"tenantry:tenant_error_ratio:rate{w}", f'{{status_code=~"{ERROR_STATUS}"}}',
                         '{status_code!="429"}', w) for w in ERROR_WINDOWS),
        *(_answers(w) for w in ("10m", "1h", "6h")),
        _gateway_ratio("tenantry:tenant_throttled_ratio:rate10m", '{status_code="429"}', ""),
        # Of those 429s, the ones the platform caused: the plugin's sheds for capacity, not the tenant's own limits.
        _record("tenantry:tenant_shed_ratio:rate10m",
                "sum by (tenant) (rate(tenantry_gateway_shed_total[10m]))\n"
                f"  / sum by (tenant) ({from_team('rate(litellm_proxy_total_requests_metric_total[10m])')})"),
        *budget_freshness(),
        budget_spent(),
        _record("tenantry:gateway_admissions:rate5m",
                "sum by (tenant, tier, engine, decision, reason) (rate(tenantry_gateway_admissions_total[5m]))"),
        _record("tenantry:gateway_refusals:rate5m",
                "sum by (tenant, tier, reason) (rate(tenantry_gateway_refused_total[5m]))"),
    ]


OBJECTIVES = ("ttft_seconds", "itl_seconds", "max_error_rate", "max_throttled_ratio", "budget_usd", "budget_alert_share")
RECORDS: tuple[str, ...] = (
    *(f"tenantry:tenant_objective:{o}" for o in OBJECTIVES),
    *(r["record"] for r in _tenant_records()),
    *(r["record"] for w in LONG_WINDOWS for r in (slo_miss_ratio(w), slo_burn(w), tenant_requests(w))),
)
"""Every series the recording rules write, whatever the Plan."""


def record_groups(plan: Plan) -> list[dict[str, Any]]:
    return [
        {"name": "tenantry-objectives", "interval": "1m", "rules": objective_records(plan)},
        {"name": "tenantry-tenant-records", "rules": _tenant_records()},
        {"name": "tenantry-tenant-records-long", "interval": "1m",
         "rules": [r for w in LONG_WINDOWS for r in (slo_miss_ratio(w), slo_burn(w), tenant_requests(w))]},
    ]
