"""Spend reconciliation: what each tenant was charged for a run against what it was served.

The gate prices every answered request client-side (its usage at the Plan's per-token prices of the
model that served it, tenantry/gate/records.py) and keeps the answer's id; LiteLLM writes its own
record of each request to PostgreSQL in batches, under that id (its spend log's request_id). Once
LiteLLM has written a record of every answer, the two must agree answer by answer: each answer
charged to the tenant that was served it, the sums within rounding. A tenant charged less than it
was served (a spend write dropped during a fault, a stream whose cost was never recorded), or more,
fails the run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone

from tenantry.gate.records import Record
from tenantry.gate.verdict import Check
from tenantry.showback import REQUESTS_SQL, ShowbackError, agrees, spend_database

KILL_SETTLE_SECONDS = 1.0
"""A kill command runs as its stage starts; by this long after, the process is gone (after the
command returned, where the gate recorded when: kill_window)."""
WRITTEN_WITHIN_SECONDS = 90.0
"""LiteLLM writes spend every `proxy_batch_write_at` seconds (the Plan's gateway.spend_write_seconds)
plus up to 5 s it draws at start; a run's last records are in PostgreSQL well within this, or they were lost."""


def recorded_requests(database_url: str, since: datetime) -> dict[str, tuple[str, float]]:
    """LiteLLM's records of requests served that started since `since`, by request id (the answer's
    `id`): the tenant charged (the team's alias) and the spend."""
    with spend_database(database_url) as cursor:
        cursor.execute(REQUESTS_SQL, (since, datetime.now(timezone.utc)))
        return {request_id: (tenant, float(spend)) for request_id, tenant, spend in cursor.fetchall()}


def kill_window(scenario_kill: tuple[int, float] | None, actions: list[dict]) -> tuple[int, float] | None:
    """The killed replica and when its kill command returned, seconds into the run, from the run's
    actions (verdict.json); the stage's start when the run did not record it."""
    if scenario_kill is None:
        return None
    replica, stage_start = scenario_kill
    action = next((a for a in actions if a.get("action", "").startswith("kill-gateway")), {})
    return replica, action.get("done", action.get("at", stage_start))


def may_die_unwritten(record: Record, killed: tuple[int, float] | None) -> bool:
    """An answer whose spend record a killed replica may have taken with it: the replica's, sent
    before the kill command returned (the signal is sent by then; later requests met a dead port or
    the restarted replica). LiteLLM holds spend logs in memory until its next batch write."""
    return killed is not None and record.gateway == killed[0] and record.sent <= killed[1]


def reconcile(records: list[Record], read_recorded: Callable[[], dict[str, tuple[str, float]]],
              wait_seconds: float = WRITTEN_WITHIN_SECONDS, sleep: Callable[[float], None] = time.sleep,
              killed: tuple[int, float] | None = None) -> Check:
    """The `spend-reconciles` check: reads LiteLLM's records (recorded_requests) until every answer
    has one, but those a killed replica may have taken with it (`killed`: kill_window), or
    `wait_seconds` pass; then compares them answer by answer. An answer lost with the killed
    replica is reported in the detail with how long before the kill it was sent."""
    answered = [r for r in records if r.ok]
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            recorded = read_recorded()
        except ShowbackError as error:
            return Check("spend-reconciles", False, f"LiteLLM's spend records could not be read: {error}")
        missing = [r for r in answered if r.response_id not in recorded]
        if all(may_die_unwritten(r, killed) for r in missing) or time.monotonic() > deadline:
            break
        sleep(2)
    problems, lost = _differences(answered, recorded, killed)
    if problems:
        return Check("spend-reconciles", False, "; ".join(problems))
    tenants, total = {r.tenant for r in answered}, sum(r.cost_usd or 0.0 for r in answered)
    detail = f"every tenant charged what it was served: {len(tenants)} tenants, {len(answered)} requests, ${total:.6f} in all"
    if lost:
        earliest = killed[1] - min(r.sent for r in lost)
        by_tenant = defaultdict(list)
        for r in lost:
            by_tenant[r.tenant].append(r.cost_usd or 0.0)
        detail = (f"every tenant charged what it was served, except answers of the killed replica's unwritten spend "
                  f"batches, lost with it: {', '.join(f'{t} {len(c)} (${sum(c):.8f})' for t, c in sorted(by_tenant.items()))}"
                  f", sent up to {earliest:.1f} s before the kill; {len(tenants)} tenants, {len(answered)} requests, "
                  f"${total:.6f} in all")
    return Check("spend-reconciles", True, detail)


def _differences(answered: list[Record], recorded: dict[str, tuple[str, float]],
                 killed: tuple[int, float] | None) -> tuple[list[str], list[Record]]:
    """What does not reconcile, per tenant, and the answers lost with a killed replica."""
    problems, lost = [], []
    served, charged = defaultdict(float), defaultdict(float)
    unpriced, uncharged, without_id = defaultdict(int), defaultdict(list), defaultdict(int)
    for r in answered:
        if not r.response_id:
            without_id[r.tenant] += 1
        elif r.response_id not in recorded:
            if may_die_unwritten(r, killed):
                lost.append(r)
            else:
                uncharged[r.tenant].append(r.cost_usd or 0.0)
        elif r.cost_usd is None:
            unpriced[r.tenant] += 1
        else:
            served[r.tenant] += r.cost_usd
    ids, unanswered = {r.response_id for r in answered}, defaultdict(list)
    for request_id, (tenant, usd) in recorded.items():
        if request_id in ids:
            charged[tenant] += usd
        else:
            unanswered[tenant].append(request_id)
    for tenant in sorted(set(served) | set(charged) | set(unpriced) | set(uncharged) | set(without_id) | set(unanswered)):
        if unanswered[tenant]:
            problems.append(f"{tenant}: LiteLLM recorded {len(unanswered[tenant])} request(s) the gate was not "
                            f"answered ({', '.join(sorted(unanswered[tenant])[:3])})")
        if without_id[tenant]:
            problems.append(f"{tenant}: {without_id[tenant]} answer(s) without an id, so not matched to a record")
        if unpriced[tenant]:
            problems.append(f"{tenant}: {unpriced[tenant]} answer(s) without usage, so unpriced")
        if uncharged[tenant]:
            problems.append(f"{tenant}: {len(uncharged[tenant])} answer(s) LiteLLM never recorded, "
                            f"served at ${sum(uncharged[tenant]):.8f}")
        if not agrees(charged[tenant], served[tenant]):
            problems.append(f"{tenant}: charged ${charged[tenant]:.8f} for answers served at "
                            f"${served[tenant]:.8f} at the Plan's prices")
    return problems, lost
