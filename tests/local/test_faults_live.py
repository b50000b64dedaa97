"""The gate's fault scenarios against the tests' stack (two gateway replicas sharing Redis and
PostgreSQL), each in its short version through `tenantry gate`, as QA runs it: what a killed
gateway replica, a PostgreSQL outage, a Redis outage and a budget spent mid-run cost the tenants, and
whether every tenant was still charged what it was served; and noisy-neighbour-overload, whose guaranteed
tenant finds its engine full and is served by its overload fallback. The stack is healthy again after each
(supervisord restarts a killed process; the scenarios start PostgreSQL and Redis again, and restore the
budget)."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from tests import live_stacks
from tests.local.conftest import SPEC, run_tenantry

pytestmark = pytest.mark.slow

SPENDS_RATE_LIMITS = True
"""The scenarios run tenants near their contracts: the modules after this one start once its windows have
ended (tests/local/conftest.py: whole_rate_limits)."""


READY_WITHIN_SECONDS = 240
"""A killed LiteLLM replica is started again by supervisord and loads its keys from the database."""


def _gate(stack, tmp_path, scenario: str) -> tuple[int, str, dict, object]:
    """The scenario's exit code, output, verdict and folder, once every gateway serves again; a process of
    the stack crashing meanwhile fails the test (live_stacks.gate_run_failing_on_a_crash)."""

    def once():
        out = tmp_path / scenario
        try:
            done = run_tenantry(stack, "gate", str(SPEC), "--scenario", scenario, "--short", "--out", str(out),
                                "--latency", "reported", timeout=900)
        finally:
            _wait_until_every_gateway_is_ready(stack)
        output = done.stdout + done.stderr
        print(output)  # shown when the test fails
        assert (out / "verdict.json").exists(), output
        return (done.returncode, done.stdout, json.loads((out / "verdict.json").read_text()), out), output, out

    return live_stacks.gate_run_failing_on_a_crash(live_stacks.TESTS, once)


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line]


def _check(verdict: dict, name: str) -> dict:
    return next(c for c in verdict["checks"] if c["name"] == name)


def _wait_until_every_gateway_is_ready(stack) -> None:
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    for url in stack.up.gateway_urls:
        while True:
            try:
                answer = httpx.get(f"{url}/health/readiness", timeout=5)
                if answer.status_code == 200 and answer.json().get("db") == "connected":
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"gateway {url} not ready again"
            time.sleep(2)


def _passes(stack, tmp_path, scenario: str, check: str = "") -> tuple[dict, object]:
    """The scenario's verdict and folder; its own check (named after it, or `check`) and spend-reconciles passed."""
    code, output, verdict, out = _gate(stack, tmp_path, scenario)
    for name in (check or scenario, "spend-reconciles"):
        assert _check(verdict, name)["passed"], _check(verdict, name)
        assert f"check {name}: PASS" in output
    assert code == 0
    return verdict, out


def test_a_gateway_replica_killed_mid_run_loses_only_its_own_requests_and_frees_their_slots(stack, tmp_path):
    verdict, _ = _passes(stack, tmp_path, "gateway-killed")
    assert "kill-gateway 1" in [a["action"] for a in verdict["actions"]], verdict["actions"]


def test_a_database_outage_keeps_keys_working_and_loses_no_spend(stack, tmp_path):
    verdict, _ = _passes(stack, tmp_path, "database-outage")
    actions = [a["action"] for a in verdict["actions"]]
    assert actions.count("stop-postgres for 30 s") == 1 and "start-postgres" in actions, verdict["actions"]
    assert "except" not in _check(verdict, "spend-reconciles")["detail"]  # nothing lost, not even with a reason


def test_a_redis_outage_keeps_guaranteed_tenants_served_within_a_bound_and_refuses_the_others(stack, tmp_path):
    verdict, _ = _passes(stack, tmp_path, "redis-outage")
    actions = [a["action"] for a in verdict["actions"]]
    assert actions.count("stop-redis for 30 s") == 1 and "start-redis" in actions, verdict["actions"]
    assert "lower-tier request(s) refused with X-Tenantry-Shed: redis" in _check(verdict, "redis-outage")["detail"]


def test_a_budget_spent_mid_run_refuses_the_tenant_on_both_replicas_until_restored(stack, tmp_path):
    """Two replicas: the cap must reach both, or one keeps serving on the old budget (its cached team)."""
    try:
        verdict, out = _passes(stack, tmp_path, "budget-exhausted")
    finally:  # the gate restores it; should that have failed, the tests after this one get globex's budget back
        run_tenantry(stack, "local", "budget", "globex", "--restore", timeout=300)
    detail = _check(verdict, "budget-exhausted")["detail"]
    assert re.search(r"globex was refused [1-9]\d* time\(s\) for its budget", detail), detail
    results = {a["kind"]: a["result"] for a in verdict["actions"] if "kind" in a}
    assert re.match(r"exit 0 globex: budget capped at \$[\d.]+ \(spent \$[\d.]+\) on 2 gateway replica\(s\)",
                    results["exhaust-budget"]), results
    assert results["restore-budget"].startswith("exit 0 globex: budget restored to $2.00000000"), results
    refused_on = {r["gateway"] for r in _records(out)
                  if r["tenant"] == "globex" and r["status"] in (400, 422)}
    assert refused_on == {0, 1}, refused_on  # both replicas refused it


def test_a_guaranteed_tenant_whose_engine_the_others_fill_is_served_by_its_overload_fallback(stack, tmp_path):
    """acme reserves 3 of its 4 sequences on tiny (tests/local/stack.yaml); globex back to back and initech
    flooding fill tiny's unreserved slots, so acme's fourth request there finds no room: its overload fallback,
    micro, serves it, and none of acme's requests is refused or fails (the overload-fallback check)."""
    verdict, out = _passes(stack, tmp_path, "noisy-neighbour-overload", check="overload-fallback")
    rerouted = [r for r in _records(out) if r["tenant"] == "acme" and r["rerouted"]]
    assert rerouted and {r["served_by"] for r in rerouted} == {"micro"}, rerouted[:3]
    assert all(r["rerouted"].startswith(("tiny -> micro (", "acme-support -> micro (")) for r in rerouted), rerouted[:3]
    assert all(r["stage"] == "saturated" for r in rerouted), [r["stage"] for r in rerouted]  # never when alone
