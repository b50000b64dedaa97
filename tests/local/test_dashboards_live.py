"""Every dashboard panel against the integration stack's Prometheus: once each
tenant has sent a few requests with its own key, every query that reads no
Kubernetes-only metric returns data (the tenant dashboard's for every local
tenant), and a panel drawn per tenant shows every local tenant."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tenantry.gate.records import retry_after_seconds
from tenantry.monitoring.dashboards import dashboards, expand, panels
from tenantry.monitoring.metrics import kubernetes_only
from tests.local.conftest import chat, stream_text

DATA_WITHIN_SECONDS = 240
"""Scrapes every 5 s, most rules every 5 s, the objectives and long windows every minute: all of it is
in well within this. A deadline for waiting, never asserted on."""
TENANT_LABELS = ("tenant", "team_alias")


def _models(tenant) -> list[str]:
    return [*tenant.models, *tenant.adapters]


RETRIES = 3
"""A 429 with a Retry-After is asked again after it, as the OpenAI SDK does (twice by default, here three times)."""


def _honouring_retry_after(send: Callable[[], httpx.Response]) -> int:
    """The status of a request sent again after each 429's Retry-After, as a client does: a stream's slot is freed by
    LiteLLM's logging event a moment after its last byte, so trial (max_concurrency 1) may find its previous stream
    still counted when it asks again at once; how long that moment lasts on a loaded machine is not the test's."""
    for _ in range(RETRIES):
        response = send()
        wait = retry_after_seconds(response.headers.get("retry-after", ""))
        if response.status_code != 429 or not wait:
            break
        time.sleep(wait)
    return response.status_code


def _send(client: httpx.Client, tenant: str, model: str) -> httpx.Response:
    """One streamed request to its end (the gateway records a request when its stream ends)."""
    body = {"model": model, "messages": [{"role": "user", "content": f"hello from {tenant}"}],
            "max_tokens": 4, "min_tokens": 4, "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as streamed:
        if streamed.status_code == 200:
            stream_text(streamed)
        else:
            streamed.read()
        return streamed


@pytest.fixture(scope="module")
def traffic(stack) -> dict[str, list[int]]:
    """Each tenant calls each model it may use, streamed (its inter-token latency is measured only then)
    and not; thrifty, whose budget is a few requests, once, with an allowance above what earlier runs on
    this stack spent (asked again while LiteLLM's cached team still holds the old budget). Statuses by
    tenant."""
    statuses: dict[str, list[int]] = {}
    for tenant in stack.up.plan.tenants:
        codes = statuses.setdefault(tenant.name, [])
        with stack.client(tenant.name) as client:
            if tenant.name == "thrifty":
                with stack.budget_allowance("thrifty"):
                    deadline = time.monotonic() + 90
                    while (status := _send(client, "thrifty", _models(tenant)[0]).status_code) != 200 \
                            and time.monotonic() < deadline:
                        time.sleep(2)
                codes.append(status)
                continue
            for model in _models(tenant):
                codes.append(_honouring_retry_after(lambda: _send(client, tenant.name, model)))
                if tenant.name != "capped":
                    codes.append(_honouring_retry_after(lambda: chat(client, model, max_tokens=4, min_tokens=1)))
    return statuses  # capped's RPM window opened here: test_local_stack's RPM test waits for its end itself


def _queries(plan) -> list[tuple[str, str, str, str | None]]:
    """(dashboard, panel, PromQL as Grafana sends it, the tenant it is for) for every query the local
    stack can answer: the tenant dashboard's once per local tenant."""
    found = []
    for name, model in dashboards(plan).items():
        for panel in panels(model):
            for target in panel["targets"]:
                if kubernetes_only(expand(target["expr"], tenant=plan.tenants[0].name)):
                    continue
                for tenant in ([t.name for t in plan.tenants] if "$tenant" in target["expr"] else [None]):
                    expr = expand(target["expr"], **({"tenant": tenant} if tenant else {}))
                    found.append((name, f"{panel['title']} [{target['refId']}]", expr, tenant))
    return found


def _answers(stack, queries) -> dict[str, list[dict]]:
    """Each query's result, asked again until every one has data or the deadline passes."""
    answers: dict[str, list[dict]] = {}
    deadline = time.monotonic() + DATA_WITHIN_SECONDS
    while True:
        for _, _, expr, _ in queries:
            if not answers.get(expr):
                answers[expr] = stack.prometheus(expr)
        if all(answers.values()) or time.monotonic() > deadline:
            return answers
        time.sleep(5)


def test_every_tenant_was_served(stack, traffic):
    assert {t: codes for t, codes in traffic.items() if set(codes) != {200}} == {}


def test_every_panel_query_returns_data_for_the_local_tenants(stack, traffic):
    plan = stack.up.plan
    queries = _queries(plan)
    answers = _answers(stack, queries)
    empty = [f"{dashboard} / {panel}" + (f" for {tenant}" if tenant else "") + f": {expr}"
             for dashboard, panel, expr, tenant in queries if not answers[expr]]
    print(f"{len(queries)} queries, {len(queries) - len(empty)} with data")
    assert empty == [], "\n".join(empty)


def test_a_panel_drawn_per_tenant_shows_every_local_tenant(stack, traffic):
    plan = stack.up.plan
    queries = [q for q in _queries(plan) if q[3] is None]
    answers = _answers(stack, queries)
    local_tenants = {t.name for t in plan.tenants}
    per_tenant = 0
    for dashboard, panel, expr, _ in queries:
        shown = {series["metric"][label] for series in answers[expr] for label in TENANT_LABELS
                 if label in series["metric"]}
        if shown:
            per_tenant += 1
            assert shown >= local_tenants, f"{dashboard} / {panel}: {sorted(local_tenants - shown)} missing: {expr}"
    assert per_tenant >= 4, "the cost dashboard's spend, top consumers and GPU-hours are drawn per tenant"
