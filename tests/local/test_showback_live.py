"""`tenantry showback` against the integration stack: requests of several tenants, plain and streamed,
through both gateway replicas, each answer's usage priced client-side at the Plan's prices; once
LiteLLM has written its batched spend records, showback's requests and spend per tenant for the
period are those answers, and every row agrees with the Plan's prices. (Every gate run checks the
same reconciliation on its own load: tenantry/gate/spend.py.)"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from tenantry.showback import model_prices
from tests.local.conftest import SPEC, chat, gateway_metric, stream_text
from tests.local.conftest import run_tenantry as _tenantry

SPEND_WRITTEN_WITHIN_SECONDS = 120
"""LiteLLM writes spend in batches (every gateway.spend_write_seconds of the Plan, 2 s); a run's last
records are in PostgreSQL well within this."""
ASKED = {"acme": ("tiny", "acme-support"), "globex": ("micro", "globex-legal"), "initech": ("tiny",)}
"""Each tenant's models and adapters asked here (capped's five a minute and thrifty's spent budget are
other tests' subjects)."""


def _showback(stack, started: float) -> tuple[subprocess.CompletedProcess, dict]:
    # The period starts at or after `started` (whole seconds, rounded down, so within a second after it),
    # so no earlier test's request is in it, and before the first request here (a second later).
    since = f"{math.floor(time.time() - started)}s"
    done = _tenantry(stack, "showback", str(SPEC), "--format", "json", "--since", since)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done, json.loads(done.stdout)


def _answered_usage(stack, tenant: str, model: str, replica: int, streamed: bool) -> dict:
    with stack.client(tenant, replica=replica) as client:
        if not streamed:
            answer = chat(client, model, f"spend {tenant} {model} {replica}", max_tokens=12)
            assert answer.status_code == 200, answer.text
            return answer.json()
        body = {"model": model, "messages": [{"role": "user", "content": f"spend {tenant} {model} {replica}"}],
                "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}}
        with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            assert answer.status_code == 200, answer.read()
            chunks = stream_text(answer)
        return next(c for c in reversed(chunks) if c.get("usage"))


def test_showback_spend_per_tenant_is_the_sum_of_the_answers_priced_at_the_plans_prices(stack):
    started = time.time()  # wall clock, as LiteLLM stamps its records; bounds the period, never asserted on
    time.sleep(1)
    prices = model_prices(stack.up.plan)
    asked_usd: dict[str, float] = defaultdict(float)
    asked_requests: dict[str, int] = defaultdict(int)
    for tenant, models in ASKED.items():
        for model in models:
            for replica, streamed in ((0, False), (1, True)):
                answer = _answered_usage(stack, tenant, model, replica, streamed)
                usage = answer["usage"]
                assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, answer
                asked_usd[tenant] += prices[answer["model"]].cost(usage["prompt_tokens"], usage["completion_tokens"])
                asked_requests[tenant] += 1

    deadline = time.monotonic() + SPEND_WRITTEN_WITHIN_SECONDS
    while True:
        done, report = _showback(stack, started)
        shown = {t["tenant"]: t for t in report["tenants"]}
        requests = {name: t["requests"] for name, t in shown.items() if t["requests"]}
        if requests == dict(asked_requests) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert requests == dict(asked_requests), "LiteLLM's records never matched the requests answered"
    assert done.returncode == 0 and report["prices_agree"] and report["warnings"] == [], done.stderr
    for tenant, usd in asked_usd.items():
        assert shown[tenant]["spend_usd"] == pytest.approx(usd, rel=1e-9, abs=1e-12), tenant
    table = _tenantry(stack, "showback", str(SPEC), "--since", f"{math.floor(time.time() - started)}s")
    print(table.stdout)
    assert table.returncode == 0 and all(tenant in table.stdout for tenant in asked_requests)


def _spend_log_statuses(stack, tenant: str, since: datetime) -> dict[str, int]:
    with psycopg.connect(stack.database_url()) as connection:
        rows = connection.execute(
            'SELECT s.status, COUNT(*) FROM "LiteLLM_SpendLogs" s JOIN "LiteLLM_TeamTable" t ON t.team_id = s.team_id '
            'WHERE t.team_alias = %s AND s."startTime" >= %s GROUP BY 1', (tenant, since)).fetchall()
    return {status or "success": count for status, count in rows}


def _failures_counted(stack, tenant: str) -> dict[str, float]:
    return gateway_metric(stack, "litellm_proxy_failed_requests_metric_total", by="exception_status", team_alias=tenant)


def test_refused_requests_are_counted_in_prometheus_and_leave_no_row_in_the_spend_log(stack):
    """A refusal is counted (LiteLLM's failed-requests counter, by team and status), never written to PostgreSQL:
    a tenant flooding refused requests must not turn them into database writes (docs/decisions.md: Refusals are
    counted, not logged). The tenant's next served request is written, so the spend writer has run past them."""
    since = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)  # LiteLLM stamps naive UTC
    counted_before = _failures_counted(stack, "acme")
    with stack.client("acme") as client:
        not_allowed = chat(client, "a-model-acme-may-not-use")
        over_tpm = chat(client, "tiny", max_tokens=stack.up.plan.tenant("acme").tpm + 1)
        served = chat(client, "tiny")
    assert not_allowed.status_code == 403 and "not available for this API key" in not_allowed.text, not_allowed.text
    assert over_tpm.status_code == 429 and "tokens a minute" in over_tpm.text, over_tpm.text
    assert served.status_code == 200, served.text
    deadline = time.monotonic() + SPEND_WRITTEN_WITHIN_SECONDS
    while (statuses := _spend_log_statuses(stack, "acme", since)).get("success", 0) < 1 \
            and time.monotonic() < deadline:
        time.sleep(2)
    assert statuses.get("success", 0) >= 1, "the served request never reached the spend log"
    assert "failure" not in statuses, statuses
    while time.monotonic() < deadline:  # LiteLLM counts a failure as its logging runs, after the answer
        counted = _failures_counted(stack, "acme")
        if all(counted.get(s, 0) > counted_before.get(s, 0) for s in ("403", "429")):
            break
        time.sleep(2)
    assert all(counted.get(s, 0) > counted_before.get(s, 0) for s in ("403", "429")), (counted_before, counted)
