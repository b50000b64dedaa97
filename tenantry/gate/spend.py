"""Spend reconciliation: what each tenant was charged for a run against what it was served.

The gate prices every answered request client-side (its usage at the Plan's per-token prices of the
model that served it, tenantry/gate/records.py); LiteLLM writes its own record of each request to
PostgreSQL in batches. Once LiteLLM has written as many records for each tenant as the gate has
answers, the two sums must agree within rounding. A tenant charged less than it was served (a spend
write dropped during a fault, a stream whose cost was never recorded), or more, fails the run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone

from tenantry.gate.records import Record
from tenantry.gate.verdict import Check
from tenantry.plan.model import Plan
from tenantry.showback import Period, ShowbackError, agrees, read_spend

KILL_SETTLE_SECONDS = 1.0
"""A kill command runs as its stage starts; by this long after, the process is gone (after the
command returned, where the gate recorded when: at_risk)."""
WRITTEN_WITHIN_SECONDS = 90.0
"""LiteLLM writes spend every `proxy_batch_write_at` seconds (the Plan's gateway.spend_write_seconds);
a run's last records are in PostgreSQL well within this, or they were lost."""


def served_by_tenant(records: list[Record]) -> dict[str, tuple[int, float, int]]:
    """(answered requests, their cost, answered requests without usage) per tenant."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for record in records:
        if record.ok:
            total = totals[record.tenant]
            total[0] += 1
            if record.cost_usd is None:
                total[2] += 1
            else:
                total[1] += record.cost_usd
    return {tenant: (int(n), usd, int(unpriced)) for tenant, (n, usd, unpriced) in totals.items()}


def recorded_by_tenant(plan: Plan, database_url: str, since: datetime) -> dict[str, tuple[int, float]]:
    """(requests, spend) LiteLLM recorded per tenant for requests that started since `since`."""
    period = Period(start=since, end=datetime.now(timezone.utc))
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for group in read_spend(database_url, plan, period).period:
        totals[group.tenant][0] += group.requests
        totals[group.tenant][1] += group.spend_usd
    return {tenant: (int(n), usd) for tenant, (n, usd) in totals.items()}


def at_risk(records: list[Record], killed: tuple[int, float, float] | None, batch_seconds: float) -> list[Record]:
    """Answers of a gateway replica killed in a window (its index; when the kill command started and
    when it returned, seconds into the run) that may not have been written: those of its last two
    batches before the kill, `batch_seconds` each (the Plan's gateway.spend_write_seconds), the one
    waiting and one being written when it died, and any it answered until the signal landed. Their
    spend can die with it (docs/decisions.md: Every gate run reconciles spend)."""
    if killed is None:
        return []
    replica, started, done = killed
    return [r for r in records if r.ok and r.gateway == replica
            and started - 2 * batch_seconds <= r.sent + r.e2e <= done + KILL_SETTLE_SECONDS]


def kill_window(scenario_kill: tuple[int, float] | None, actions: list[dict]) -> tuple[int, float, float] | None:
    """The killed replica and when its kill command started and returned, from the run's actions
    (verdict.json); the stage's start when the run did not record it."""
    if scenario_kill is None:
        return None
    replica, stage_start = scenario_kill
    action = next((a for a in actions if a.get("action", "").startswith("kill-gateway")), {})
    return replica, action.get("at", stage_start), action.get("done", action.get("at", stage_start))


def reconcile(records: list[Record], read_recorded: Callable[[], dict[str, tuple[int, float]]],
              wait_seconds: float = WRITTEN_WITHIN_SECONDS, sleep: Callable[[float], None] = time.sleep,
              lost_with_a_replica: list[Record] = ()) -> Check:
    """The `spend-reconciles` check: reads LiteLLM's records (recorded_by_tenant) until every
    tenant's count matches the gate's answers (or `wait_seconds` pass), then compares the sums.
    `lost_with_a_replica` (at_risk) are answers whose records a killed replica may have taken with
    it: a tenant may be charged that much less, and the detail says how much it was."""
    served = served_by_tenant(records)
    risk = served_by_tenant(list(lost_with_a_replica))
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            recorded = read_recorded()
        except ShowbackError as error:
            return Check("spend-reconciles", False, f"LiteLLM's spend records could not be read: {error}")
        counts_match = all(n - risk.get(t, (0, 0.0, 0))[0] <= recorded.get(t, (0, 0.0))[0] <= n
                           for t, (n, _, _) in served.items()) and set(recorded) <= set(served)
        if counts_match or time.monotonic() > deadline:
            break
        sleep(2)
    problems, lost = [], []
    for tenant in sorted(set(served) | set(recorded)):
        answered, usd, unpriced = served.get(tenant, (0, 0.0, 0))
        count, charged = recorded.get(tenant, (0, 0.0))
        risked, risked_usd, _ = risk.get(tenant, (0, 0.0, 0))
        if unpriced:
            problems.append(f"{tenant}: {unpriced} answer(s) without usage, so unpriced")
        if not answered - risked <= count <= answered:
            problems.append(f"{tenant}: LiteLLM recorded {count} request(s), the gate was answered {answered} times")
        elif count < answered:
            lost.append(f"{tenant} {answered - count} (${usd - charged:.8f})")
        if not (agrees(charged, usd) or (count < answered and usd - risked_usd - 1e-9 <= charged <= usd)):
            problems.append(f"{tenant}: charged ${charged:.8f}, served ${usd:.8f} at the Plan's prices")
    if problems:
        return Check("spend-reconciles", False, "; ".join(problems))
    total = sum(usd for _, usd, _ in served.values())
    detail = (f"every tenant charged what it was served: {len(served)} tenants, "
              f"{sum(n for n, _, _ in served.values())} requests, ${total:.6f} in all")
    if lost:
        detail = (f"every tenant charged what it was served, except answers of the killed replica's last unwritten "
                  f"spend batch, lost with it: {', '.join(lost)}; {len(served)} tenants, "
                  f"{sum(n for n, _, _ in served.values())} requests, ${total:.6f} in all")
    return Check("spend-reconciles", True, detail)
