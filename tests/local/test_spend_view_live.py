"""Budgets on the real local stack as tenants live them: a showback tenant served past its budget while its
spent share passes every alert threshold, and the spend view a tenant reads with its own key (LiteLLM's
/key/info and /team/info, opened exactly; docs/decisions.md: A tenant reads its own spend, and only its own)."""

from __future__ import annotations

import time

import pytest

from tenantry.monitoring.dashboards import GATEWAY_JOB
from tests.local.conftest import RunningStack, chat

SHOWBACK = "trial"
SPEND_REQUESTS = 40
"""At most this many requests, back to back, to spend 1.5 budgets (about 8 at the local prices)."""
ROUNDS = 30
"""Then at most this many, one every REQUEST_EVERY_SECONDS, while waiting for the spent share: LiteLLM's
budget gauges carry the spend cached with the key (60 s), so the share moves only with a request served
after the cache refreshed, and the rule group evaluates once a minute."""
REQUEST_EVERY_SECONDS = 10
SHARE = f'tenantry:tenant_budget_spent:ratio{{tenant="{SHOWBACK}"}}'


def _teams(admin) -> dict[str, dict]:
    return {t["team_alias"]: t for t in admin.get("/team/list").json()}


def _gauges(stack: RunningStack) -> dict[str, list]:
    """What the share is recorded from, per gateway replica (tenantry/monitoring/records.py: budget_spent), and
    whether Prometheus reaches the replicas: a failure then says which part never came."""
    team, tenant = f'team_alias="{SHOWBACK}"', f'tenant="{SHOWBACK}"'
    queries = (f"litellm_team_max_budget_metric{{{team}}}", f"litellm_remaining_team_budget_metric{{{team}}}",
               f"increase(litellm_spend_metric_total{{{team}}}[2m])",
               f"tenantry:tenant_budget_reset:timestamp{{{tenant}}} - time()",
               f"tenantry:tenant_budget_updated:timestamp{{{tenant}}}", f'up{{job="{GATEWAY_JOB}"}}')
    return {query: [(r["metric"].get("instance"), r["value"][1]) for r in stack.prometheus(query)] for query in queries}


def _crossed(stack: RunningStack, level: str) -> bool:
    """Prometheus's own view: the tenant's spent share at or past its threshold of this level."""
    return bool(stack.prometheus(
        f'tenantry:tenant_budget_spent:ratio{{tenant="{SHOWBACK}"}} >= on (tenant) group_left '
        f'tenantry:tenant_objective:budget_alert_share{{tenant="{SHOWBACK}", level="{level}"}}'))


@pytest.mark.slow
def test_a_showback_tenant_is_served_past_its_budget_and_its_spent_share_passes_every_threshold(stack):
    tenant = stack.up.plan.tenant(SHOWBACK)
    assert tenant.budget_mode == "showback" and tenant.gateway_max_budget_usd > 100 * tenant.budget_usd
    statuses: list[int] = []
    with stack.client(SHOWBACK) as client, stack.client() as admin:
        for _ in range(SPEND_REQUESTS):
            statuses.append(chat(client, "micro", "hello there").status_code)
            spent = _teams(admin)[SHOWBACK]["spend"]
            if spent > 1.5 * tenant.budget_usd:
                break
        assert spent > 1.5 * tenant.budget_usd, f"{SPEND_REQUESTS} requests spent {spent} USD"
        for _ in range(ROUNDS):
            if all(_crossed(stack, level) for level in ("info", "warning", "critical")):
                break
            time.sleep(REQUEST_EVERY_SECONDS)
            statuses.append(chat(client, "micro", "hello there").status_code)
        else:
            pytest.fail(f"{SHOWBACK} spent {spent} USD of {tenant.budget_usd}; its share in Prometheus: "
                        f"{stack.prometheus(SHARE)}; what the share is made of: {_gauges(stack)}")
    assert set(statuses) == {200}, statuses  # never refused, past the budget included
    share = float(stack.prometheus(SHARE)[0]["value"][1])
    assert share > 1, share  # judged against the Plan's budget, not the gateway's runaway guard


def test_a_tenant_reads_its_own_spend_and_nobody_elses(stack):
    with stack.client("acme") as acme, stack.client() as admin:
        teams = _teams(admin)
        own = acme.get("/key/info")
        assert own.status_code == 200, own.text
        team_id = own.json()["info"]["team_id"]
        assert team_id == teams["acme"]["team_id"]
        view = acme.get("/team/info", params={"team_id": team_id})
        assert view.status_code == 200, view.text
        info = view.json()["team_info"]
        assert info["team_alias"] == "acme" and info["spend"] == pytest.approx(teams["acme"]["spend"], abs=1e-6)
        assert info["metadata"]["budget_usd"] == 5 and info["metadata"]["budget_mode"] == "chargeback"
        assert {k["team_id"] for k in view.json()["keys"]} == {team_id}
        others = [t.name for t in stack.up.plan.tenants if t.name != "acme"]
        for text in (own.text, view.text):
            assert not [name for name in others if f'"{name}"' in text or stack.key(name) in text]
            assert not [name for name in others if teams[name]["team_id"] in text]

        another_team = acme.get("/team/info", params={"team_id": teams["globex"]["team_id"]})
        assert another_team.status_code == 403, another_team.text
        assert "a key reads its own key and team only" in another_team.text and "globex" not in another_team.text
        another_key = acme.get("/key/info", params={"key": stack.key("globex")})
        assert another_key.status_code == 403
        assert another_key.json()["error"]["message"] == "/key/info reads the calling key's own row: leave out ?key="
        assert acme.get("/team/list").status_code == 404 and acme.get("/key/list").status_code == 404
