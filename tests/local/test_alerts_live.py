"""Alerting on the real local stack: Prometheus evaluates the Plan's rules and
sends what fires to the stack's Alertmanager, which delivers it, routed as on
Kubernetes, to the local receiver (<stack>/alerts/received.jsonl). Stopping an
engine must page or ticket as the routing says, then resolve once it is back."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx
import pytest

from tenantry.monitoring.rules import rule_groups
from tests.local.alerts import Notification, notifications, routed_to, wait_for

STOPPED_ENGINE = "micro"
DELIVERY_MARGIN_SECONDS = 240
"""Beyond EngineDown's `for`: scrapes failing, a rule evaluation, Alertmanager's group_wait, and a
2-core machine busy with engines."""
RESOLVE_WITHIN_SECONDS = 240


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


@pytest.mark.slow
def test_a_stopped_engine_reaches_the_receiver_as_engine_down_and_resolves_once_it_is_back(stack):
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
        print(f"\nEngineDown for engine {STOPPED_ENGINE}: {firing.received_at - stopped_at:.0f} s from stop to the "
              f"receiver's {firing.path} (rule `for`: {rule.get('for', '0s')})")
    restarted_at = time.time()  # the engine is healthy again: engine_stopped waited for it
    resolved = wait_for(f"EngineDown for engine {STOPPED_ENGINE} resolved",
                         engine_down("resolved", lambda starts_at: starts_at == firing.starts_at),
                         RESOLVE_WITHIN_SECONDS, stack)
    print(f"resolved {resolved.received_at - restarted_at:.0f} s after the engine was healthy again")

    assert firing.path == resolved.path == f"/{routed_to(stack, firing.labels)}"
    assert firing.labels["severity"] == rule["labels"]["severity"]
    assert firing.alert["annotations"]["runbook_url"] == f"{stack.up.plan.platform.runbook_base_url}/EngineDown.md"
    assert STOPPED_ENGINE in firing.alert["annotations"]["description"]
