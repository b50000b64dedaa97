"""The local stack, for real: tenants' keys against real engines through the
real gateway, with limits, budgets, fallbacks and metrics. The tests run in
file order; engines failing are test_local_stack_engines.py's."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import httpx
import pytest

from tenantry.catalog.models import catalog_model
from tenantry.gateway.reconciler import GatewayRefused, LiteLLM, reconcile
from tenantry.local import stack as local
from tenantry.local.health import process_alive
from tenantry.local.models import job_for
from tenantry.configs.teams import desired_teams
from tenantry.stacks import plan_stack
from tests.local.conftest import SPEC, answers_again_after_idle, chat, longest_token, stream_text


def test_a_key_calls_its_models_and_adapter_streamed_and_not(stack):
    with stack.client("acme") as client:
        for model in ("tiny", "acme-support"):
            # min_tokens: the random weights may end an answer at once, which is not what is tested here.
            answer = chat(client, model, min_tokens=1)
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] > 0
            assert answer.json()["choices"][0]["message"]["content"].strip()
            with client.stream("POST", "/v1/chat/completions",
                               json={"model": model, "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 8, "min_tokens": 8, "stream": True,
                                     "stream_options": {"include_usage": True}}) as streamed:
                assert streamed.status_code == 200
                chunks = stream_text(streamed)
            deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
            # The eight tokens reach the client as text, in as many chunks as vLLM sent: it merges the deltas a
            # busy API server has not sent yet (vllm/v1/engine/output_processor.py, RequestOutputCollector), so
            # one chunk per token holds only on an idle machine (a loaded fresh clone saw all eight in one).
            assert "".join(d for d in deltas if d).strip(), deltas
            assert [c["usage"]["completion_tokens"] for c in chunks if c.get("usage")][-1:] == [8], chunks[-2:]
        text = client.post("/v1/completions", json={"model": "acme-support", "prompt": "hello", "max_tokens": 8,
                                                    "min_tokens": 1})
        assert text.status_code == 200 and text.json()["choices"][0]["text"].strip()


def test_every_token_the_local_models_can_generate_decodes_to_visible_text(stack):
    from tokenizers import Tokenizer

    for engine in plan_stack(str(SPEC)).engines:
        model_dir = Path(job_for(engine, stack.layout.models)["model_dir"])
        config = json.loads((model_dir / "config.json").read_text())
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        vocabulary = catalog_model(engine.model).architecture.vocab_size
        assert config["vocab_size"] == tokenizer.get_vocab_size(with_added_tokens=True) == vocabulary
        invisible = [i for i in range(vocabulary) if i != config["eos_token_id"] and not any(
            c.isprintable() and not c.isspace() for c in tokenizer.decode([i], skip_special_tokens=True))]
        assert invisible == [], f"engine {engine.name}: ids that decode to no visible text: {invisible[:20]}"


REPEAT_ATTEMPTS = 3
"""Streams of one repeated token asked for, until one reaches LiteLLM's guard as over 100 identical chunks."""


def _longest_identical_run(chunks: list[dict]) -> int:
    """The longest run of identical chunks as LiteLLM's guard counts them (its safety_checker: content over 2
    characters, equal in the last REPEATED_STREAMING_CHUNK_LIMIT chunks)."""
    texts = [t for c in chunks if c.get("choices") and (t := c["choices"][0]["delta"].get("content"))]
    run = longest = 1
    for previous, current in zip(texts, texts[1:], strict=False):
        run = run + 1 if current == previous and len(current) > 2 else 1
        longest = max(longest, run)
    return longest


def test_a_stream_repeating_one_chunk_is_never_cut_by_the_gateway(stack):
    """LiteLLM ends a stream with a 500 after 100 identical chunks in a row unless told otherwise; the Plan sets
    its limit beyond any stream (docs/decisions.md: The gateway does not cut a repeating stream). The engine is
    made to repeat its longest token with a logit bias, for more chunks than LiteLLM's default allows. vLLM
    merges the deltas its API server has not sent yet into one chunk (RequestOutputCollector), which a loaded
    machine does often enough to break every run of 100 (63 in a fresh clone's make test beside a tests/unit
    run): a stream so merged never met the guard, so the test asks again, up to REPEAT_ATTEMPTS times, and
    judges only what the guard would have seen."""
    runs = []
    for _ in range(REPEAT_ATTEMPTS):
        with stack.client("acme") as acme, acme.stream("POST", "/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "repeat"}], "max_tokens": 300,
                "stream": True, "logit_bias": {str(longest_token(stack, "tiny")): 100}}) as response:
            assert response.status_code == 200
            chunks = stream_text(response)
        assert not [c for c in chunks if "error" in c], [c for c in chunks if "error" in c]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        runs.append(_longest_identical_run(chunks))
        if runs[-1] > 100:  # what LiteLLM's guard would have cut at 100
            return
    pytest.fail(f"no stream reached the guard: the longest runs of identical chunks were {runs} (vLLM merged the "
                f"rest); nothing was judged")


def test_a_model_outside_the_allow_list_is_refused_with_403(stack):
    with stack.client("acme") as client:
        answer = chat(client, "globex-legal")
        assert answer.status_code == 403
        assert answer.headers["X-Tenantry-Error"] == "permission_denied"
        assert "model 'globex-legal' is not available for this API key" in answer.json()["error"]["message"]
    with stack.client("capped") as client:
        assert chat(client, "tiny").status_code == 403


def test_an_unknown_key_is_refused(stack):
    with httpx.Client(base_url=stack.url, headers={"Authorization": "Bearer sk-not-a-key"}, timeout=30) as client:
        assert chat(client, "tiny").status_code in (401, 403)


def test_the_rpm_limit_refuses_exactly_after_the_limit(stack):
    """From a fresh minute (earlier tests' traffic of capped, the fault scenarios send for every tenant,
    would count in LiteLLM's), exactly the Plan's RPM is served, each answer saying how many requests are
    left, counting down to 0, and the next ones are refused for the request limit."""
    rpm = plan_stack(str(SPEC)).tenant("capped").rpm
    with stack.client("capped") as client:
        own = client.get("/key/info").json()["info"]  # its team and its key's hash name its windows
        stack.rate_windows_ended(own["team_id"], hashlib.sha256(stack.key("capped").encode()).hexdigest())
        answers = [chat(client, "micro") for _ in range(rpm + 2)]
    codes = [a.status_code for a in answers]
    served = codes.count(200)
    assert codes == [200] * rpm + [429] * 2, codes
    left = [int(a.headers["x-ratelimit-team-remaining-requests"]) for a in answers[:served]]
    assert left == list(range(served - 1, -1, -1)), left  # the last one served took the last request
    assert {a.headers["x-ratelimit-team-limit-requests"] for a in answers[:served]} <= {str(rpm)}
    for refused in answers[served:]:
        assert f"the tenant is over its limit of {rpm} requests a minute" in refused.text, refused.text
        assert int(refused.headers["retry-after"]) > 0


def _stream_priced(stack, tenant: str, model: str, prices: dict) -> tuple[int, float, str]:
    """One streamed request: its status, the cost of its usage at the Plan's prices (0 without an
    answer), and the refusal's text."""
    body = {"model": model, "messages": [{"role": "user", "content": "spend some money " * 8}], "max_tokens": 16,
            "stream": True, "stream_options": {"include_usage": True}}
    with stack.client(tenant) as client, client.stream("POST", "/v1/chat/completions", json=body) as answer:
        if answer.status_code != 200:
            return answer.status_code, 0.0, answer.read().decode()
        chunks = stream_text(answer)
    usage = next(c for c in reversed(chunks) if c.get("usage"))
    served = prices[usage["model"]]
    return 200, served.cost(usage["usage"]["prompt_tokens"], usage["usage"]["completion_tokens"]), ""


def test_a_budget_spent_mid_run_stops_the_tenant_and_every_stream_in_flight_is_charged(stack):
    """thrifty's budget is a few requests. Earlier gate runs on this stack may have spent it, so the test gives
    it a fresh allowance of that size above what it has spent, and restores the budget after. Streams go two
    at a time (its max_concurrency), so the budget runs out with streams in flight: each answered one is still
    charged, and the spend recorded is what was served, never less."""
    from concurrent.futures import ThreadPoolExecutor

    from tenantry.showback import model_prices

    prices = model_prices(stack.up.plan)
    with stack.budget_allowance("thrifty") as spent_before:
        results: list[tuple[int, float, str]] = []
        deadline = time.monotonic() + 90  # LiteLLM's cached team takes up to a minute to see the allowance
        while time.monotonic() < deadline and not any(status == 200 for status, _, _ in results):
            results = [_stream_priced(stack, "thrifty", "micro", prices)]
            time.sleep(2)
        deadline = time.monotonic() + 90
        with ThreadPoolExecutor(2) as pool:
            while results[-1][0] == 200 and time.monotonic() < deadline and len(results) < 60:
                results += pool.map(lambda _: _stream_priced(stack, "thrifty", "micro", prices), range(2))
                time.sleep(1)  # spend reaches the database every few seconds
        statuses = [status for status, _, _ in results]
        # LiteLLM 1.108 answers an exceeded budget with 400 (or 422) and type budget_exceeded.
        assert statuses[0] == 200 and statuses[-1] in (400, 422, 429), statuses
        assert "budget" in results[-1][2].lower(), results[-1][2]
        served_usd = sum(cost for _, cost, _ in results)
        # The refusal came from spend LiteLLM counts in memory; the database gets it in batches.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            team = stack.team("thrifty")
            if team["spend"] - spent_before >= served_usd * (1 - 1e-9):
                break
            time.sleep(2)
        assert team["spend"] > team["max_budget"], team
        assert team["spend"] - spent_before == pytest.approx(served_usd, rel=1e-6), (team, statuses)


def test_the_reconciler_is_idempotent_updates_quotas_and_blocks_removed_tenants(stack):
    client = LiteLLM(stack.url, stack.master_key)
    plan = plan_stack(str(SPEC))
    keys = stack.up.keys
    assert reconcile(client, desired_teams(plan), keys) == []

    changed = [dict(t, rpm_limit=t["rpm_limit"] + 1) if t["team_alias"] == "globex" else t for t in desired_teams(plan)]
    actions = reconcile(client, changed, keys)
    assert [(a.verb, a.tenant) for a in actions] == [("update-team", "globex")]
    team = next(t for t in client.teams() if t["team_alias"] == "globex")
    assert team["rpm_limit"] == plan.tenant("globex").rpm + 1

    without_initech = [t for t in desired_teams(plan) if t["team_alias"] != "initech"]
    reduced_keys = {k: v for k, v in keys.items() if k != "initech"}
    actions = reconcile(client, without_initech, reduced_keys)
    assert ("block-team-keys", "initech") in [(a.verb, a.tenant) for a in actions]
    with stack.client("initech") as initech:
        assert chat(initech, "tiny").status_code in (401, 403)

    restored = reconcile(client, desired_teams(plan), keys)
    assert {(a.verb, a.tenant) for a in restored} == {("unblock-key", "initech")}
    with stack.client("initech") as initech:
        assert chat(initech, "tiny").status_code == 200


def _rotate(admin: LiteLLM, plan, keys: dict[str, str], tenant: str, old: str, new: str, retired_alias: str) -> None:
    """runbooks/procedures/rotate-a-tenant-key.md on the local stack: free the old key's alias, register the new
    key with the reconciler (as after `pulumi up --replace` of the tenant's password)."""
    admin.call("POST", "/key/update", {"key": old, "key_alias": retired_alias})
    actions = reconcile(admin, desired_teams(plan), {**keys, tenant: new})
    assert [(a.verb, a.tenant) for a in actions] == [("create-key", tenant)], actions


def test_a_key_rotated_by_the_runbook_keeps_the_tenant_served_throughout(stack):
    """Both keys work between registering the new one and blocking the old; after the block only the new one
    does, as the tenant with its own team, models and limits. The test then rotates back the same way."""
    import secrets

    admin, plan, keys = LiteLLM(stack.url, stack.master_key), plan_stack(str(SPEC)), dict(stack.up.keys)
    original, rotated = keys["globex"], "sk-" + secrets.token_urlsafe(24)

    answers: list[str] = []  # every answer's status and text, for the assertion's message

    def served(key: str) -> int:
        with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
            answer = chat(client, "micro")
        answers.append(f"{key[:6]}…: {answer.status_code} {answer.text[:300]}")
        return answer.status_code

    try:
        _rotate(admin, plan, keys, "globex", original, rotated, "globex-retired-test")
        assert (served(original), served(rotated)) == (200, 200), answers  # the tenant switches without an outage
        info = admin.key_info(rotated)
        assert info["key_alias"] == "globex" and info["team_id"] == admin.key_info(original)["team_id"], info
        admin.call("POST", "/key/block", {"key": original})
        assert (served(original), served(rotated)) == (401, 200), answers
    finally:  # back to the stack's own key, so later tests keep theirs
        admin.call("POST", "/key/update", {"key": rotated, "key_alias": "globex-rotated-test"})
        admin.call("POST", "/key/update", {"key": original, "key_alias": "globex"})
        admin.call("POST", "/key/unblock", {"key": original})
        admin.call("POST", "/key/block", {"key": rotated})
    assert reconcile(admin, desired_teams(plan), keys) == []  # the stack's keys as the reconciler wants them
    assert (served(original), served(rotated)) == (200, 401), answers


def test_a_key_whose_alias_another_key_holds_is_refused_with_the_tenant_and_what_to_do(stack):
    """The keys file lost while the database kept the old keys (or a key replaced by hand): LiteLLM
    refuses the new key's alias, and the reconciler says for which tenant, why and what to do."""
    import secrets

    admin, plan, keys = LiteLLM(stack.url, stack.master_key), plan_stack(str(SPEC)), dict(stack.up.keys)
    with pytest.raises(GatewayRefused) as refused:
        reconcile(admin, desired_teams(plan), {**keys, "globex": "sk-" + secrets.token_urlsafe(24)})
    assert (refused.value.tenant, refused.value.status) == ("globex", 400), refused.value
    assert "alias 'globex' already exists" in str(refused.value), refused.value
    assert "rotate-a-tenant-key.md" in str(refused.value), refused.value
    assert reconcile(admin, desired_teams(plan), keys) == []  # nothing was changed


def test_the_gateway_keeps_an_idle_connection_open_past_uvicorns_default(stack):
    """LiteLLM runs with KEEPALIVE_TIMEOUT from configs/litellm.py (75 s), so a client's pool closes an idle
    connection before the gateway does. Uvicorn's default closes it after 5 s: a request reusing it then fails
    with "Remote end closed connection without response"."""
    # idle beyond uvicorn's default keep-alive of 5 s
    assert answers_again_after_idle(stack.up.gateway_urls[0], "/health/liveliness", 6), \
        "the gateway closed an idle connection"


def test_keys_file_is_private(stack):
    mode = stat.S_IMODE(os.stat(stack.layout.keys_file).st_mode)
    assert mode == 0o600
    assert set(json.loads(stack.layout.keys_file.read_text())) == {t.name for t in plan_stack(str(SPEC)).tenants}


def test_prometheus_scrapes_every_engine_and_every_tenant(stack):
    plan = plan_stack(str(SPEC))
    for tenant in ("acme", "globex"):
        with stack.client(tenant) as client:
            assert chat(client, "tiny").status_code == 200
    deadline = time.monotonic() + 60
    engines, teams = set(), set()
    while time.monotonic() < deadline:
        engines = {r["metric"].get("model_name") for r in stack.prometheus("vllm:num_requests_running")}
        teams = {r["metric"].get("team_alias") for r in stack.prometheus('{__name__=~"litellm_.*requests.*",team_alias!=""}')}
        if engines >= {e.name for e in plan.engines} and teams >= {"acme", "globex", "capped", "thrifty"}:
            break
        time.sleep(2)
    assert engines >= {e.name for e in plan.engines}
    assert teams >= {"acme", "globex", "capped", "thrifty"}
    assert stack.prometheus("vllm:kv_cache_usage_perc")


def test_status_reports_every_process_healthy(stack):
    rows = local.status(stack.layout)
    assert {r.name for r in rows} == {"gateway-0", "gateway-1", "postgres", "redis", "prometheus", "alertmanager",
                                      "alert-receiver", "engine-tiny", "engine-micro"}
    assert all(r.healthy and r.state == "RUNNING" and r.pid for r in rows), rows


def test_each_gateway_replica_collects_garbage_on_its_event_loop(stack):
    """CPython 3.11's collector, started by an allocation inside a ContextVar.set, can free what that set copies
    (python/cpython#148891, the gateway's segfault): the plugin moves the collector onto the loop as LiteLLM
    loads it (tests/unit/test_policy_gc.py proves the crash and its absence). Each replica says so as it starts."""
    for replica in (0, 1):
        logs = "".join(p.read_text(errors="replace") for p in stack.layout.logs.glob(f"gateway-{replica}.log*"))
        assert "tenantry: cyclic garbage is collected on the event loop" in logs, replica
        assert "the cyclic collector runs as CPython schedules it" not in logs, replica


@pytest.mark.slow
def test_down_leaves_nothing_and_up_again_keeps_data_and_keys(stack):
    pids = [r.pid for r in local.status(stack.layout) if r.pid]
    keys_before = dict(stack.up.keys)
    assert local.down(stack.layout, progress=lambda _: None) == []
    assert not [pid for pid in pids if process_alive(pid)]
    again = local.up(str(SPEC), stack.layout, progress=lambda _: None, log_requests=True)
    assert again.keys == keys_before
    assert again.changes == 0, "the database kept every team and key"
    with stack.client("acme") as client:
        assert chat(client, "acme-support").status_code == 200
    stack.up = again


def test_the_cli_reports_status_logs_and_smoke(stack, capsys):
    from tenantry.cli import main

    where = ["--dir", str(stack.layout.root), "--port-base", str(stack.layout.port_base)]
    assert main(["local", "status", *where]) == 0
    assert capsys.readouterr().out.count("healthy") == 9
    code = main(["local", "smoke", *where])
    out = capsys.readouterr().out
    lines = {line.split()[1]: line for line in out.splitlines() if line.strip()}
    assert set(lines) == {t.name for t in plan_stack(str(SPEC)).tenants}
    assert lines["acme"].startswith("✓") and "HTTP 200" in lines["acme"] and "tokens: '" in lines["acme"]
    # thrifty may have spent its tiny budget earlier in this file; smoke fails exactly when a tenant does.
    assert code == (0 if all(line.startswith("✓") for line in lines.values()) else 1)
    assert all(line.startswith("✓") or "budget_exceeded" in line for line in lines.values()), lines
    assert main(["local", "logs", "gateway-0", "-n", "5", *where]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["local", "logs", "nope", *where]) == 4  # a stack error, told apart from a failed check
    assert "no log named nope" in capsys.readouterr().err
