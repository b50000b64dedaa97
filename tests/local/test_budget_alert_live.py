"""A tenant pushed past 80 % of its budget on the real local stack: LiteLLM's
budget gauges move, Prometheus's TenantBudgetSpent fires at the tenant's own
thresholds, and Alertmanager delivers it to the receiver the tier routes to
(initech is spot: its warning is a ticket, its info reaches nobody).

initech's budget (1 USD) is thousands of requests deep at the local prices, so
the test first spends a little, then lowers the team's max_budget through
LiteLLM's admin API until that spend is 85 % of it (restored afterwards), and
keeps requesting a little at a time. LiteLLM's budget gauges report the team
spend cached with the key (user_api_key_cache, 60 s), so the warning can only
arrive once a request is served after that cache has been refreshed: the test
spaces its requests and waits, bounded, for the notification."""

from __future__ import annotations

import time

import pytest

from tests.local.alerts import Notification, notifications, routed_to, wait_for
from tests.local.conftest import RunningStack, chat

TENANT = "initech"
SPENT_SHARE = 0.85
"""Where the lowered budget puts the tenant: past the warning's 80 %, short of the critical 95 %."""
WARM_UP_REQUESTS = 60
"""Spend first, so that one more request moves the share by under 1.5 %: the 60 s until LiteLLM refreshes
the key's cached budget pass well before the tenant reaches 100 %."""
REQUEST_EVERY_SECONDS = 15
BATCH_WRITE_SECONDS = 10
"""How often spend reaches PostgreSQL at most: LiteLLM's default proxy_batch_write_at (the Plan's is 2 s)."""
PATIENCE_SECONDS = 420
"""LiteLLM's key cache (60 s), the objectives' group (once a minute), the alert's `for` (1m), Alertmanager's
group_wait, on a 2-core machine busy with engines."""


def _team(admin) -> dict:
    return next(t for t in admin.get("/team/list").json() if t["team_alias"] == TENANT)


def _recorded_spend(admin, more_than: float) -> float:
    """The team's spend once LiteLLM's batch writer has put all of it in PostgreSQL: above `more_than` and
    unchanged across more than one batch interval. Lowering the budget from a
    figure the gateway's memory is already past would refuse every further request."""
    deadline = time.monotonic() + 180
    previous = -1.0
    while time.monotonic() < deadline:
        spend = _team(admin)["spend"]
        if spend > more_than and spend == previous:
            return spend
        previous = spend
        time.sleep(BATCH_WRITE_SECONDS + 2)
    pytest.fail(f"{TENANT}'s recorded spend did not settle above {more_than} USD (last {previous})")


@pytest.mark.slow
def test_a_tenant_past_80_percent_of_its_budget_gets_its_warning_where_its_tier_routes_it(stack: RunningStack):
    tenant = next(t for t in stack.up.plan.tenants if t.name == TENANT)
    warning_share = tenant.budget_alert_at[1]
    assert tenant.budget_alert_at[0] < warning_share < SPENT_SHARE < tenant.budget_alert_at[2]
    started = time.time()
    with stack.client(TENANT) as client, stack.client() as admin:
        before = _team(admin)["spend"]
        for _ in range(WARM_UP_REQUESTS):
            assert chat(client, "tiny", "hello there").status_code == 200
        team_id = _team(admin)["team_id"]
        lowered = _recorded_spend(admin, more_than=before) / SPENT_SHARE
        assert admin.post("/team/update", json={"team_id": team_id, "max_budget": lowered}).status_code == 200
        try:
            def budget_warning() -> Notification | None:
                chat(client, "tiny", "hello there")  # refused once past the lowered budget: the gauges stand
                time.sleep(REQUEST_EVERY_SECONDS - 2)
                return next((n for n in notifications(stack, started) if n.alert["status"] == "firing"
                             and n.labels.get("alertname") == "TenantBudgetSpent"
                             and n.labels.get("tenant") == TENANT and n.labels.get("severity") == "warning"), None)

            arrived = wait_for(f"TenantBudgetSpent warning for {TENANT}", budget_warning, PATIENCE_SECONDS, stack)
        finally:
            admin.post("/team/update", json={"team_id": team_id, "max_budget": tenant.gateway_max_budget_usd})
    assert arrived.labels["tier"] == "spot"
    assert arrived.labels["threshold"] == f"{warning_share:g}"
    assert arrived.path == f"/{routed_to(stack, arrived.labels)}" == "/ticket"
    assert arrived.alert["annotations"]["runbook_url"] == f"{stack.up.plan.platform.runbook_base_url}/TenantBudgetSpent.md"
    assert TENANT in arrived.alert["annotations"]["summary"]
    info = [n for n in notifications(stack, started) if n.labels.get("alertname") == "TenantBudgetSpent"
            and n.labels.get("severity") == "info"]
    assert info == [], "an info alert reached a receiver"
