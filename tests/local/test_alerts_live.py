"""Alerting on the real local stack: Prometheus evaluates the Plan's rules and
sends what fires to the stack's Alertmanager, which delivers it, routed as on
Kubernetes, to the local receiver (<stack>/alerts/received.jsonl).

The drills: three real failures at once, as `tenantry local drill` runs them
(tenantry/local/drills.py): an engine, PostgreSQL and Redis stopped, each
until its alerts reach the receiver where the routing sends them, then started
again until they resolve; then a tenant pushed past 80 % of its budget, which
gets its warning where its tier routes it (that drill needs PostgreSQL and
Redis, so it runs after).

The budget drill: initech's budget (1 USD) is thousands of requests deep at the
local prices, so it first spends a little, then lowers the team's max_budget
through LiteLLM's admin API until that spend is 85 % of it (restored
afterwards), and keeps requesting a little at a time. LiteLLM's budget gauges
report the team spend cached with the key (user_api_key_cache, 60 s), so the
warning can only arrive once a request is served after that cache has been
refreshed: the drill spaces its requests and waits, bounded, for the
notification. initech sends only to tiny; the engine drill stops micro.

The module runs right after the faults' scenarios (tests/conftest.py): it needs
no whole rate limits but the budget drill's, which it waits for itself, so the
windows the scenarios opened end while its drills run."""

from __future__ import annotations

import hashlib
import time

import pytest

from tenantry.local.drills import DrillResult, for_seconds, run_drills
from tenantry.monitoring.rules import rule_groups
from tests.local.alerts import Notification, notifications, routed_to, wait_for
from tests.local.conftest import RunningStack, chat

STOPPED_ENGINE = "micro"
FAILURES = ("engine-down", "postgres-down", "redis-down")
BUDGET_TENANT = "initech"
WAITS_FOR_ITS_OWN_RATE_LIMITS = True  # the budget drill's own, for initech (tests/local/conftest.py)
SPENT_SHARE = 0.85
"""Where the lowered budget puts the tenant: past the warning's 80 %, short of the critical 95 %."""
WARM_UP_REQUESTS = 60
"""Spend first, so that one more request moves the share by under 1.5 %: the 60 s until LiteLLM refreshes
the key's cached budget pass well before the tenant reaches 100 %."""
REQUEST_EVERY_SECONDS = 15
BATCH_WRITE_SECONDS = 10
"""How often spend reaches PostgreSQL at most: LiteLLM's default proxy_batch_write_at (the Plan's is 2 s)."""
BUDGET_PATIENCE_SECONDS = 420
"""LiteLLM's key cache (60 s), the objectives' group (once a minute), the alert's `for` (1m), Alertmanager's
group_wait, on a 2-core machine busy with engines."""


def _recorded_spend(stack, more_than: float) -> float:
    """The team's spend once LiteLLM's batch writer has put all of it in PostgreSQL: above `more_than` and
    unchanged across more than one batch interval. Lowering the budget from a
    figure the gateway's memory is already past would refuse every further request."""
    deadline = time.monotonic() + 180
    previous = -1.0
    while time.monotonic() < deadline:
        spend = stack.team(BUDGET_TENANT)["spend"]
        if spend > more_than and spend == previous:
            return spend
        previous = spend
        time.sleep(BATCH_WRITE_SECONDS + 2)
    pytest.fail(f"{BUDGET_TENANT}'s recorded spend did not settle above {more_than} USD (last {previous})")


def _budget_drill(stack: RunningStack) -> tuple[float, Notification]:
    """Push BUDGET_TENANT to SPENT_SHARE of a lowered budget and wait for its TenantBudgetSpent warning; the
    time the drill began and the notification."""
    tenant = stack.up.plan.tenant(BUDGET_TENANT)
    started = time.time()
    with stack.client(BUDGET_TENANT) as client, stack.client() as admin:
        team_id = stack.team(BUDGET_TENANT)["team_id"]
        # Whole limits for the warm-up: an earlier module (the faults' scenarios) may have spent its minute.
        stack.rate_windows_ended(team_id, hashlib.sha256(stack.key(BUDGET_TENANT).encode()).hexdigest())
        before = stack.team(BUDGET_TENANT)["spend"]
        for _ in range(WARM_UP_REQUESTS):
            answer = chat(client, "tiny", "hello there")
            assert answer.status_code == 200, answer.text
        lowered = _recorded_spend(stack, more_than=before) / SPENT_SHARE
        assert admin.post("/team/update", json={"team_id": team_id, "max_budget": lowered}).status_code == 200
        try:
            def budget_warning() -> Notification | None:
                chat(client, "tiny", "hello there")  # refused once past the lowered budget: the gauges stand
                time.sleep(REQUEST_EVERY_SECONDS - 2)
                return next((n for n in notifications(stack, started) if n.alert["status"] == "firing"
                             and n.labels.get("alertname") == "TenantBudgetSpent"
                             and n.labels.get("tenant") == BUDGET_TENANT and n.labels.get("severity") == "warning"),
                            None)

            return started, wait_for(f"TenantBudgetSpent warning for {BUDGET_TENANT}", budget_warning,
                                     BUDGET_PATIENCE_SECONDS, stack)
        finally:
            admin.post("/team/update", json={"team_id": team_id, "max_budget": tenant.gateway_max_budget_usd})


@pytest.fixture(scope="module")
def drills(stack):
    """The three failures together, then the budget drill, the first time a test asks for either."""
    failures = run_drills(stack.layout, list(FAILURES), engine=STOPPED_ENGINE, progress=print)
    return {"failures": {r.fault: r for r in failures}, "budget": _budget_drill(stack)}


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAILURES)
def test_a_failure_reaches_the_receiver_as_its_alerts_where_they_route_and_they_resolve_once_it_is_back(
        stack, drills, fault):
    result: DrillResult = drills["failures"][fault]
    rules = {r["alert"]: r for g in rule_groups(stack.up.plan) for r in g["rules"] if "alert" in r}
    for a in result.arrivals:
        print(f"\n{fault}: {a.alert} at {a.receiver or 'nobody'} {a.fired_after or 0:.0f} s after the stop (for "
              f"{a.waited_for}), resolved {a.resolved_after or 0:.0f} s after {result.part} was healthy again")
        assert a.firing is not None, f"{a.alert} never reached the receiver after {fault}"
        assert a.resolved_after is not None, f"{a.alert} did not resolve after {result.part} was back"
        assert a.fired_after >= for_seconds(rules[a.alert]), "an alert arrived before its `for` had passed"
        assert a.receiver == f"/{routed_to(stack, a.firing.labels)}"
        assert a.firing.labels["severity"] == rules[a.alert]["labels"]["severity"]
        assert a.firing.alert["annotations"]["runbook_url"] == \
            f"{stack.up.plan.platform.runbook_base_url}/{a.alert}.md"
    if fault == "engine-down":
        (engine_down,) = result.arrivals
        assert engine_down.receiver == "/page" and STOPPED_ENGINE in engine_down.firing.alert["annotations"]["description"]


@pytest.mark.slow
def test_a_tenant_past_80_percent_of_its_budget_gets_its_warning_where_its_tier_routes_it(stack, drills):
    """initech is spot: its warning is a ticket, its info reaches nobody."""
    tenant = stack.up.plan.tenant(BUDGET_TENANT)
    warning_share = tenant.budget_alert_at[1]
    assert tenant.budget_alert_at[0] < warning_share < SPENT_SHARE < tenant.budget_alert_at[2]
    started, arrived = drills["budget"]
    assert arrived.labels["tier"] == "spot"
    assert arrived.labels["threshold"] == f"{warning_share:g}"
    assert arrived.path == f"/{routed_to(stack, arrived.labels)}" == "/ticket"
    assert arrived.alert["annotations"]["runbook_url"] == f"{stack.up.plan.platform.runbook_base_url}/TenantBudgetSpent.md"
    assert BUDGET_TENANT in arrived.alert["annotations"]["summary"]
    info = [n for n in notifications(stack, started) if n.labels.get("alertname") == "TenantBudgetSpent"
            and n.labels.get("severity") == "info"]
    assert info == [], "an info alert reached a receiver"
