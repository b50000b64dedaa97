"""Alerting on the real local stack: Prometheus evaluates the Plan's rules and
sends what fires to the stack's Alertmanager, which delivers it, routed as on
Kubernetes, to the local receiver (<stack>/alerts/received.jsonl).

Two drills, run at once (each waits minutes on rule evaluations, `for` clauses
and caches, and neither touches what the other does): an engine stopped must
page or ticket as the routing says, then resolve once it is back; a tenant
pushed past 80 % of its budget gets its warning where its tier routes it.

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
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from tenantry.monitoring.rules import rule_groups
from tests.local.alerts import Notification, notifications, routed_to, wait_for
from tests.local.conftest import RunningStack, chat

STOPPED_ENGINE = "micro"
BUDGET_TENANT = "initech"
WAITS_FOR_ITS_OWN_RATE_LIMITS = True  # the budget drill's own, for initech (tests/local/conftest.py)
DELIVERY_MARGIN_SECONDS = 240
"""Beyond EngineDown's `for`: scrapes failing, a rule evaluation, Alertmanager's group_wait, and a
2-core machine busy with engines."""
RESOLVE_WITHIN_SECONDS = 240
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


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d)", duration))


def _prometheus(stack, path: str) -> dict:
    answer = httpx.get(f"http://127.0.0.1:{stack.up.ports.prometheus}{path}", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def test_prometheus_loads_every_rule_group_of_the_plan_and_evaluates_each_rule_without_error(stack):
    wanted = {g["name"]: [r.get("alert") or r.get("record") for r in g["rules"]] for g in rule_groups(stack.up.plan)}
    deadline = time.monotonic() + 120
    while True:  # until every rule has been evaluated once: "unknown" is not yet, not an error
        loaded = {g["name"]: g["rules"] for g in _prometheus(stack, "/api/v1/rules")["groups"]}
        if time.monotonic() > deadline or all(r["health"] != "unknown" for rules in loaded.values() for r in rules):
            break
        time.sleep(3)
    assert {name: [r["name"] for r in rules] for name, rules in loaded.items()} == wanted
    never = [r["name"] for rules in loaded.values() for r in rules if r["health"] == "unknown"]
    assert never == [], "rules Prometheus never evaluated in 120 s"
    failing = {r["name"]: r.get("lastError") for rules in loaded.values() for r in rules if r["health"] == "err"}
    assert failing == {}


def test_alertmanager_is_up_and_prometheus_sends_to_it(stack):
    url = f"http://127.0.0.1:{stack.up.ports.alertmanager}"
    assert httpx.get(f"{url}/-/ready", timeout=10).status_code == 200
    deadline = time.monotonic() + 60
    while (active := [a["url"] for a in _prometheus(stack, "/api/v1/alertmanagers")["activeAlertmanagers"]]) == [] \
            and time.monotonic() < deadline:
        time.sleep(2)
    assert active == [f"{url}/api/v2/alerts"]


def _engine_down_rule(plan) -> dict:
    rules = [r for g in rule_groups(plan) for r in g["rules"] if r.get("alert") == "EngineDown"]
    assert rules, "the Plan's rules have no EngineDown"
    return rules[0]


@dataclass(frozen=True)
class EngineDown:
    rule: dict
    stopped_at: float
    restarted_at: float
    firing: Notification
    resolved: Notification


def _engine_down_drill(stack: RunningStack) -> EngineDown:
    """Stop STOPPED_ENGINE until its EngineDown reaches the receiver, start it again, and wait for the resolve."""
    rule = _engine_down_rule(stack.up.plan)
    patience = _seconds(rule.get("for", "0s")) + DELIVERY_MARGIN_SECONDS

    def engine_down(status: str, began: Callable[[float], bool]) -> Callable[[], Notification | None]:
        # Only this stop's alert: the stack's own start may have fired (and resolved) one for the engine too.
        def find() -> Notification | None:
            return next((n for n in notifications(stack, stopped_at) if n.labels.get("alertname") == "EngineDown"
                         and n.labels.get("engine") == STOPPED_ENGINE and n.alert["status"] == status
                         and began(n.starts_at)), None)
        return find

    stopped_at = time.time()
    with stack.engine_stopped(STOPPED_ENGINE):
        firing = wait_for(f"EngineDown for engine {STOPPED_ENGINE}",
                          engine_down("firing", lambda starts_at: starts_at >= stopped_at), patience, stack)
    restarted_at = time.time()  # the engine is healthy again: engine_stopped waited for it
    resolved = wait_for(f"EngineDown for engine {STOPPED_ENGINE} resolved",
                        engine_down("resolved", lambda starts_at: starts_at == firing.starts_at),
                        RESOLVE_WITHIN_SECONDS, stack)
    return EngineDown(rule, stopped_at, restarted_at, firing, resolved)


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
    """Both drills, started together the first time a test asks for either; each test waits for its own."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="alert-drill") as pool:
        yield {"engine-down": pool.submit(_engine_down_drill, stack), "budget": pool.submit(_budget_drill, stack)}


@pytest.mark.slow
def test_a_stopped_engine_reaches_the_receiver_as_engine_down_and_resolves_once_it_is_back(stack, drills):
    drill: EngineDown = drills["engine-down"].result()
    rule, firing, resolved = drill.rule, drill.firing, drill.resolved
    print(f"\nEngineDown for engine {STOPPED_ENGINE}: {firing.received_at - drill.stopped_at:.0f} s from stop to the "
          f"receiver's {firing.path} (rule `for`: {rule.get('for', '0s')}); resolved "
          f"{resolved.received_at - drill.restarted_at:.0f} s after the engine was healthy again")
    assert firing.path == resolved.path == f"/{routed_to(stack, firing.labels)}"
    assert firing.labels["severity"] == rule["labels"]["severity"]
    assert firing.alert["annotations"]["runbook_url"] == f"{stack.up.plan.platform.runbook_base_url}/EngineDown.md"
    assert STOPPED_ENGINE in firing.alert["annotations"]["description"]


@pytest.mark.slow
def test_a_tenant_past_80_percent_of_its_budget_gets_its_warning_where_its_tier_routes_it(stack, drills):
    """initech is spot: its warning is a ticket, its info reaches nobody."""
    tenant = stack.up.plan.tenant(BUDGET_TENANT)
    warning_share = tenant.budget_alert_at[1]
    assert tenant.budget_alert_at[0] < warning_share < SPENT_SHARE < tenant.budget_alert_at[2]
    started, arrived = drills["budget"].result()
    assert arrived.labels["tier"] == "spot"
    assert arrived.labels["threshold"] == f"{warning_share:g}"
    assert arrived.path == f"/{routed_to(stack, arrived.labels)}" == "/ticket"
    assert arrived.alert["annotations"]["runbook_url"] == f"{stack.up.plan.platform.runbook_base_url}/TenantBudgetSpent.md"
    assert BUDGET_TENANT in arrived.alert["annotations"]["summary"]
    info = [n for n in notifications(stack, started) if n.labels.get("alertname") == "TenantBudgetSpent"
            and n.labels.get("severity") == "info"]
    assert info == [], "an info alert reached a receiver"
