"""`tenantry showback` against the integration stack: a short real gate run
records each request's usage and its cost at the Plan's prices client-side
(its warm-up requests too: unmeasured, but charged); once LiteLLM has written
its batched spend records, showback's requests and spend per tenant for the
run are those the gate recorded, and every row agrees with the Plan's prices."""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from tenantry.gate.records import WARM_UP_JSONL, read_records
from tests.local.conftest import SPEC, chat, gateway_metric
from tests.local.conftest import run_tenantry as _tenantry

SPEND_WRITTEN_WITHIN_SECONDS = 120
"""LiteLLM writes spend in batches (every 2 s on the local stack: tenantry/local/services.py); a run's last
records are in PostgreSQL well within this."""


def _showback(stack, started: float) -> tuple[subprocess.CompletedProcess, dict]:
    # The period starts at or after `started` (whole seconds, rounded down, so within a second after it),
    # so no earlier test's request is in it, and before the gate's first request (a second later).
    since = f"{math.floor(time.time() - started)}s"
    done = _tenantry(stack, "showback", str(SPEC), "--format", "json", "--since", since)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done, json.loads(done.stdout)


def test_showback_spend_per_tenant_is_the_sum_of_the_costs_the_gate_recorded(stack, tmp_path):
    started = time.time()  # wall clock, as LiteLLM stamps its records; bounds the period, never asserted on
    time.sleep(1)
    out = tmp_path / "gate"
    gate = _tenantry(stack, "gate", str(SPEC), "--scenario", "steady", "--short", "--out", str(out), timeout=900)
    print(gate.stdout + gate.stderr)  # shown when the test fails
    assert gate.returncode in (0, 1), "the gate did not run"  # 1: an SLO missed, not what this test is about
    served = [r for r in read_records(out) if r.ok]
    assert served and all(r.cost_usd is not None and r.cost_usd > 0 for r in served), served[:3]
    warm_up = read_records(out, WARM_UP_JSONL)
    assert warm_up and all(r.cost_usd is not None and r.cost_usd > 0 for r in warm_up), warm_up[:3]
    served += warm_up
    gate_usd: dict[str, float] = defaultdict(float)
    gate_requests: dict[str, int] = defaultdict(int)
    for record in served:
        gate_usd[record.tenant] += record.cost_usd
        gate_requests[record.tenant] += 1

    deadline = time.monotonic() + SPEND_WRITTEN_WITHIN_SECONDS
    while True:
        done, report = _showback(stack, started)
        shown = {t["tenant"]: t for t in report["tenants"]}
        requests = {name: t["requests"] for name, t in shown.items() if t["requests"]}
        if requests == dict(gate_requests) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert requests == dict(gate_requests), "LiteLLM's records of the run never matched the gate's requests"
    assert done.returncode == 0 and report["prices_agree"] and report["warnings"] == [], done.stderr
    for tenant, usd in gate_usd.items():
        assert shown[tenant]["spend_usd"] == pytest.approx(usd, rel=1e-9, abs=1e-12), tenant
    assert {t.name for t in stack.up.plan.tenants} >= set(gate_requests)
    table = _tenantry(stack, "showback", str(SPEC), "--since", f"{math.floor(time.time() - started)}s")
    print(table.stdout)
    assert table.returncode == 0 and all(tenant in table.stdout for tenant in gate_requests)


def _spend_log_statuses(stack, tenant: str, since: datetime) -> dict[str, int]:
    from tenantry.local.credentials import postgres_password

    url = f"postgresql://litellm:{postgres_password(stack.layout)}@127.0.0.1:{stack.up.ports.postgres}/litellm"
    with psycopg.connect(url) as connection:
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
    assert over_tpm.status_code == 429 and "Limit type: tokens" in over_tpm.text, over_tpm.text
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
