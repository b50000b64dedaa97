"""Each tenant's figures against its SLO, and each scenario's own checks.

Pure functions of the measured requests, the Plan and the scenario: the
quitting listener, `tenantry gate` and the report all read the same verdict.

Errors, as the spec's `max_error_rate` defines them: requests without a
response, 5xx, other 4xx, and streams cut short. A tenant's own 429s (its
RPM, TPM, concurrency or budget, and for best-effort and spot tenants the
gateway pausing their tier) are not errors: they are the contract working.
For a guaranteed tenant a 429 from admission (an engine "saturated", no
free slot) is an error: its reservation was not kept.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from tenantry.gate.records import Record
from tenantry.gate.scenario_model import Scenario
from tenantry.plan.model import Plan, TenantPlan

SHED_HEADER = "X-Tenantry-Shed"
"""The tenant-policy plugin's header on its 429s for capacity (its SHED_HEADER; the gate runs
without LiteLLM, which the plugin imports); every 429 without it is the tenant's own quota
(docs/decisions.md: A shed is what the gateway's X-Tenantry-Shed header says)."""
REROUTE_HEADER = "X-Tenantry-Rerouted"
"""The plugin's header on an answer the tenant's overload fallback served (its REROUTE_HEADER)."""
MIN_QUEUED_SECONDS = 0.25
ORDER_TOLERANCE_SECONDS = 2.0
"""First tokens closer than this are not ordered: the front ends deliver with about that much
jitter on a busy machine, and first come first served keeps a guaranteed request further
behind queued spot requests than this (docs/decisions.md: Priority-order tolerance of 2 s)."""


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ms(value: float | None) -> str:
    """Seconds as whole milliseconds, or a dash."""
    return "—" if value is None else f"{value * 1000:,.0f}"


def served_by(plan: Plan, engine: str) -> set[str]:
    """What a client asks for to reach an engine: its model and its adapters."""
    return {engine, *(a.name for a in plan.engine(engine).lora.adapters)}


def is_shed(record: Record) -> bool:
    return record.status == 429 and bool(record.shed)


def is_error(record: Record, tenant: TenantPlan) -> bool:
    if record.status == 429:
        return tenant.tier == "guaranteed" and is_shed(record)
    return not record.ok


def met_slo(record: Record, tenant: TenantPlan) -> bool:
    """One request within both latency targets: its time to first token, and its mean
    time per output token after the first (DistServe's goodput)."""
    if not record.ok or record.ttft is None or record.ttft * 1000 > tenant.ttft_p95_ms:
        return False
    if record.streamed and record.output_tokens > 1:
        per_token = (record.e2e - record.ttft) / (record.output_tokens - 1)
        return per_token * 1000 <= tenant.itl_p95_ms
    return True


@dataclass
class TenantFigures:
    tenant: str
    tier: str
    judged: bool
    requests: int = 0
    succeeded: int = 0
    quota_429: int = 0
    shed_429: int = 0
    errors: int = 0
    error_rate: float = 0.0
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    cached_share: float | None = None
    """Of the prompt tokens of the answered requests, the share the engines found in their prefix cache: the
    cache state every TTFT figure was measured in (None when no engine reported it)."""
    itl_p95: float | None = None
    e2e_p50: float | None = None
    e2e_p95: float | None = None
    output_tokens_per_s: float = 0.0
    goodput: float = 0.0
    """Requests per second that met the tenant's SLO."""
    slo_ttft_p95: float = 0.0
    slo_itl_p95: float = 0.0
    slo_max_error_rate: float = 0.0
    passed: bool | None = None
    """None when the tenant is not judged (pushed beyond its contract on purpose, sent nothing, or
    spot refused by admission throughout)."""
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Latency beyond its SLO where the run reports latency without judging it (Scenario.latency_judged)."""


def cached_share(records: list[Record]) -> float | None:
    """Cached prompt tokens over prompt tokens, of the records whose engine reported its cache hits."""
    reported = [r for r in records if r.cached_tokens is not None and r.prompt_tokens]
    if not reported:
        return None
    return sum(r.cached_tokens or 0 for r in reported) / sum(r.prompt_tokens for r in reported)


def tenant_figures(records: list[Record], tenant: TenantPlan, seconds: float, judged: bool,
                   latency_judged: bool = True) -> TenantFigures:
    mine = [r for r in records if r.tenant == tenant.name]
    figures = TenantFigures(tenant.name, tenant.tier, judged, slo_ttft_p95=tenant.ttft_p95_ms / 1000,
                            slo_itl_p95=tenant.itl_p95_ms / 1000, slo_max_error_rate=tenant.max_error_rate)
    figures.requests = len(mine)
    figures.succeeded = sum(r.ok for r in mine)
    figures.shed_429 = sum(is_shed(r) for r in mine)
    figures.quota_429 = sum(r.status == 429 for r in mine) - figures.shed_429
    figures.errors = sum(is_error(r, tenant) for r in mine)
    counted = [r for r in mine if r.status != 429 or is_error(r, tenant)]
    figures.error_rate = figures.errors / len(counted) if counted else 0.0
    ok = [r for r in mine if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    gaps = [gap for r in ok if r.streamed for gap in r.gaps]
    figures.ttft_p50, figures.ttft_p95 = percentile(ttfts, 0.5), percentile(ttfts, 0.95)
    figures.cached_share = cached_share(ok)
    figures.itl_p95 = percentile(gaps, 0.95)
    figures.e2e_p50, figures.e2e_p95 = percentile([r.e2e for r in ok], 0.5), percentile([r.e2e for r in ok], 0.95)
    if seconds > 0:
        figures.output_tokens_per_s = sum(r.output_tokens for r in ok) / seconds
        figures.goodput = sum(met_slo(r, tenant) for r in ok) / seconds
    if not figures.judged:
        return figures
    if not ok and tenant.tier == "spot" and mine and figures.shed_429 == len(mine):
        # Spot runs on idle capacity only: refused by admission throughout is its
        # contract kept (the others were busy), not broken. Reported, not judged.
        figures.reasons.append(f"admission paused it throughout ({figures.shed_429} refused): spot runs only on "
                               "idle capacity")
        return figures
    if not ok:
        figures.reasons.append(f"no request succeeded ({figures.requests} sent)")
    latency = figures.reasons if latency_judged else figures.notes
    if figures.ttft_p95 is not None and figures.ttft_p95 > figures.slo_ttft_p95:
        latency.append(f"p95 time to first token {figures.ttft_p95 * 1000:.0f} ms > {tenant.ttft_p95_ms:g} ms")
    if figures.itl_p95 is not None and figures.itl_p95 > figures.slo_itl_p95:
        latency.append(f"p95 inter-token latency {figures.itl_p95 * 1000:.0f} ms > {tenant.itl_p95_ms:g} ms")
    if figures.error_rate > tenant.max_error_rate:
        figures.reasons.append(f"error rate {figures.error_rate:.1%} > {tenant.max_error_rate:.1%} "
                               f"({figures.errors} of {len(counted)})")
    figures.passed = not figures.reasons
    return figures


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


def _active_seconds(scenario: Scenario, tenant: str) -> float:
    return sum(stage.seconds for stage in scenario.stages if tenant in stage.loads) or scenario.seconds


def check_over_quota(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    over = scenario.subject["over"]
    quota = {t.name: sum(r.tenant == t.name and r.status == 429 and not is_shed(r) for r in records)
             for t in plan.tenants}
    shed_guaranteed = {t.name: sum(r.tenant == t.name and is_shed(r) for r in records)
                       for t in plan.tenants if t.tier == "guaranteed"}
    others = {name: count for name, count in quota.items() if name != over and count}
    problems = []
    if not quota[over]:
        problems.append(f"{over} went over its quota and got no 429")
    if others:
        problems.append("quota 429s for tenants within their quota: " + ", ".join(f"{n} {c}" for n, c in others.items()))
    problems += [f"guaranteed tenant {n} was refused {c} times by admission" for n, c in shed_guaranteed.items() if c]
    detail = "; ".join(problems) or f"{over}: {quota[over]} quota 429s; every other tenant: none"
    return Check("over-quota", not problems, detail)


def priority_inversions(records: list[Record], plan: Plan) -> tuple[int, list[tuple[Record, Record]]]:
    """Pairs (guaranteed G, lower-tier S) both waiting at the engine at once, and
    those where S got its first token first.

    S counts as waiting when G arrives if it was sent before G and shows no first
    token within two engine steps of G's arrival (a request already scheduled
    shows its first token after one step; a step is the run's median
    inter-token gap; two steps are at least MIN_QUEUED_SECONDS). S overtakes G when its
    first token reaches the client more than ORDER_TOLERANCE_SECONDS (or a step, if
    longer) before G's."""
    tiers = {t.name: t.tier for t in plan.tenants}
    streamed = [r for r in records if r.ok and r.streamed and r.ttft is not None]
    step = percentile([g for r in streamed for g in r.gaps], 0.5) or 0.0
    waited = max(2 * step, MIN_QUEUED_SECONDS)
    tolerance = max(step, ORDER_TOLERANCE_SECONDS)
    guaranteed = [r for r in streamed if tiers.get(r.tenant) == "guaranteed"]
    lower = [r for r in streamed if tiers.get(r.tenant) in ("best-effort", "spot")]
    pairs, inversions = 0, []
    for g in guaranteed:
        for s in lower:
            if s.sent <= g.sent and s.first_token_at > g.sent + waited:
                pairs += 1
                if s.first_token_at + tolerance < g.first_token_at:
                    inversions.append((g, s))
    return pairs, inversions


def check_priority(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    pairs, inversions = priority_inversions(records, plan)
    if inversions:
        g, s = max(inversions, key=lambda pair: pair[0].first_token_at - pair[1].first_token_at)
        return Check("priority-ordering", False, f"{len(inversions)} of {pairs} queued pairs out of order; worst: "
                     f"{s.tenant} sent at {s.sent:.2f} s got its first token {g.first_token_at - s.first_token_at:.2f} "
                     f"s before {g.tenant} sent at {g.sent:.2f} s")
    if not pairs:
        # Nothing to order is a pass, and said as such: admission kept the tiers from
        # queueing together (on the local stack spot pauses while the others are active).
        tiers = {t.name: t.tier for t in plan.tenants}
        shed = sum(1 for r in records if tiers.get(r.tenant) in ("best-effort", "spot") and is_shed(r))
        return Check("priority-ordering", True, f"no guaranteed request was queued together with a lower-tier one "
                     f"(0 pairs to order): admission refused {shed} lower-tier requests")
    return Check("priority-ordering", True, f"every guaranteed request queued with lower-tier ones got its first "
                 f"token first ({pairs} queued pairs)")


def check_cache(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    seconds = {r.probe.rsplit(":", 1)[0]: r for r in records if r.probe.endswith(":second") and r.ok}
    if not seconds:
        return Check("cache-isolation", False, "no probe pair completed")
    wrong, unknown, hits, misses = [], [], 0, 0
    for pair, record in sorted(seconds.items()):
        first_tenant, second_tenant, engine = pair.split("/")[:3]
        same = plan.tenant(first_tenant).cache_salt == plan.tenant(second_tenant).cache_salt
        if record.cached_tokens is None:
            unknown.append(pair)
            continue
        hit = record.cached_tokens > 0
        hits += hit
        misses += not hit
        if hit != same:
            wrong.append(f"{second_tenant} after {first_tenant} on {engine}: {record.cached_tokens} cached tokens "
                         f"({'same' if same else 'different'} salt)")
    if unknown:
        return Check("cache-isolation", False, f"the engines report no cached tokens for {len(unknown)} probes "
                     "(vLLM --enable-prompt-tokens-details)")
    if wrong:
        return Check("cache-isolation", False, "; ".join(wrong[:5]))
    return Check("cache-isolation", True, f"{len(seconds)} probe pairs: {hits} hits where the salts match, "
                 f"{misses} misses where they differ")


def stage_figures(records: list[Record], plan: Plan, scenario: Scenario) -> dict[str, dict[str, TenantFigures]]:
    """Each stage's figures per tenant, every tenant judged against its SLO."""
    result, start = {}, 0.0
    for stage in scenario.stages:
        inside = [r for r in records if start <= r.sent < start + stage.seconds]
        result[stage.name] = {t.name: tenant_figures(inside, t, stage.seconds, judged=t.name in stage.loads,
                                                     latency_judged=scenario.latency_judged)
                              for t in plan.tenants}
        start += stage.seconds
    return result


def check_overload_fallback(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """noisy-neighbour-overload's victim: none of its requests to the engine the others filled refused for
    capacity (a 429 with X-Tenantry-Shed) and none failed; some rerouted while the others filled it
    (X-Tenantry-Rerouted), each served by a model of its overload fallback. Its requests asked of its other
    engines are reported: there it may send beyond what its traffic share reserved (its concurrency times the
    share, rounded up), and capacity may refuse that, as the Plan says."""
    victim, engine = plan.tenant(scenario.subject["victim"]), scenario.subject["engine"]
    mine = [r for r in records if r.tenant == victim.name]
    crowded = [r for r in mine if r.sent >= scenario.stages[0].seconds and r.target in served_by(plan, engine)]
    shed = [r for r in mine if is_shed(r) and r.target in served_by(plan, engine)]
    shed_elsewhere = [r for r in mine if is_shed(r) and r not in shed]
    failed = [r for r in mine if not r.ok and r.status != 429]
    own_limits = [r for r in mine if r.status == 429 and not is_shed(r)]
    rerouted = [r for r in mine if r.ok and r.rerouted]
    elsewhere = [r for r in rerouted if r.served_by not in victim.overload_fallback]
    reasons = Counter(r.rerouted.rpartition(" (")[2].rstrip(")") for r in rerouted)
    others_shed = Counter(r.shed for r in records if r.tenant != victim.name and is_shed(r))
    problems = []
    if shed:
        problems.append(f"{len(shed)} of its request(s) refused for capacity (first: {shed[0].error[:100]})")
    if failed:
        problems.append(f"{len(failed)} of its request(s) failed (first: HTTP {failed[0].status} "
                        f"{failed[0].error[:100]})")
    if not crowded:
        problems.append(f"it sent no request to {engine} while the others filled it")
    elif not rerouted:
        problems.append(f"none of its requests was rerouted: {engine} never ran out of room for it")
    if elsewhere:
        problems.append(f"{len(elsewhere)} rerouted answer(s) served by a model outside its overload fallback (first: "
                        f"{elsewhere[0].rerouted})")
    seen = (f"{victim.name} sent {len(mine)} requests, {len(crowded)} to {engine} while the others filled it: "
            f"{len(rerouted)} rerouted ({', '.join(f'{n} for {why}' for why, n in reasons.most_common()) or 'none'}) "
            f"and served by {', '.join(sorted({r.served_by for r in rerouted})) or 'nobody'}, "
            f"{len(rerouted) / len(crowded) if crowded else 0:.0%} of those; the others were refused for capacity "
            f"{sum(others_shed.values())} time(s) ({', '.join(f'{n} {why}' for why, n in others_shed.most_common())})")
    if own_limits:
        seen += (f"; {len(own_limits)} of {victim.name}'s requests were refused by its own limits, which rerouting "
                 f"does not lift (first: {own_limits[0].error[:100]})")
    if shed_elsewhere:
        seen += (f"; {len(shed_elsewhere)} of {victim.name}'s requests to its other engines were refused for capacity "
                 f"beyond their reservation there (first: {shed_elsewhere[0].error[:100]})")
    detail = "; ".join([*problems, seen]) if problems else f"{seen}; none to {engine} refused for capacity, none failed"
    return Check("overload-fallback", not problems, detail)


CHECKS = {
    "overload-fallback": check_overload_fallback,
    "over-quota": check_over_quota,
    "priority-ordering": check_priority,
    "cache-isolation": check_cache,
}


@dataclass
class Verdict:
    scenario: str
    passed: bool
    tenants: dict[str, TenantFigures]
    checks: list[Check]
    stages: dict[str, dict[str, TenantFigures]]

    def to_dict(self) -> dict:
        return asdict(self)


def verdict(records: list[Record], plan: Plan, scenario: Scenario) -> Verdict:
    from tenantry.gate import fault_checks, latency_checks  # they build on this module's Check

    # Streams cut by a stopped or killed engine are the fault itself, judged by its check (fault_checks.py).
    cut = {id(r) for r in fault_checks.cut_by_an_engine_fault(records, plan, scenario)}
    judged = [r for r in records if id(r) not in cut]
    loaded = {name for stage in scenario.stages for name in stage.loads}
    tenants = {t.name: tenant_figures(judged, t, _active_seconds(scenario, t.name),
                                      judged=t.name in loaded and t.name not in scenario.not_judged,
                                      latency_judged=scenario.latency_judged)
               for t in plan.tenants}
    every_check = {**CHECKS, **fault_checks.CHECKS, **latency_checks.CHECKS}
    names = scenario.checks + (() if scenario.latency_judged else scenario.ratio_checks)
    checks = [every_check[name](records, plan, scenario) for name in names]
    passed = all(f.passed is not False for f in tenants.values()) and all(c.passed for c in checks)
    if not any(f.judged for f in tenants.values()) and not checks:
        passed = False  # nothing was measured: never a silent pass
    return Verdict(scenario.name, passed, tenants, checks, stage_figures(judged, plan, scenario))
