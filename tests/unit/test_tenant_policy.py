"""The tenant-policy plugin's hook, path by path, as LiteLLM calls it: identity
and caps from the key's tenant, admission against a real Redis (started here)
with the engines' load seeded into its metrics cache, and how LiteLLM loads
it. tests/local exercises it inside the real gateway."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from litellm.proxy._types import ProxyException, UserAPIKeyAuth

from tests.unit.policy_plugin import errors, failsafe, key, ledger, metrics, release_once_full_and_ask, run, seen, shed
from tests.unit.policy_plugin import plugin as tp


def set_admission(policy, **changes) -> None:
    """The policy admits with these settings from here on, as if its gateway had restarted with them."""
    policy.settings = dataclasses.replace(policy.settings,
                                          admission=dataclasses.replace(policy.settings.admission, **changes))


# --- identity and caps ---------------------------------------------------------------------


def test_identity_comes_from_the_key_and_forged_values_are_replaced(policy):
    before = metrics.OVERRIDES.labels(tenant="initech", field="priority")._value.get()
    data = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "priority": -100,
            "cache_salt": "tenant-acme", "extra_body": {"priority": -5, "cache_salt": "tenant-acme"},
            "extra_headers": {"x-vllm-priority": "-9"}}
    out = run(policy.async_pre_call_hook(key("initech"), None, data, "atext_completion"))
    assert "priority" not in out and "cache_salt" not in out  # initech shares the unsalted cache
    assert out["extra_body"] == {"priority": 100}
    assert out["extra_headers"] == {"X-Vllm-Priority": "100"}
    assert metrics.OVERRIDES.labels(tenant="initech", field="priority")._value.get() == before + 2


def test_own_salt_and_guaranteed_priority(policy):
    out = run(policy.async_pre_call_hook(key("acme"), None, {"model": "acme-support", "prompt": "hi"},
                                         "atext_completion"))
    assert out["cache_salt"] == "tenant-acme" and out["extra_body"]["priority"] == 0
    assert out["metadata"]["tenantry_slots"][1].endswith(":reserved:acme")


def test_keys_outside_tenantry_pass_untouched(policy):
    data = {"model": "tiny", "prompt": "hi", "priority": 3}
    assert run(policy.async_pre_call_hook(UserAPIKeyAuth(), None, dict(data), "atext_completion")) == data


def test_output_cap_refuses_more_and_fills_in_the_cap(policy):
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x", "max_tokens": 500},
                                       "atext_completion"))
    assert refused.value.code == "400" and "exceeds the 128 tokens the spot tier allows" in refused.value.message
    out = run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert out["max_tokens"] == 128


def test_every_spelling_of_an_output_length_is_held_to_the_cap(policy):
    for field in ("max_tokens", "max_completion_tokens"):
        data = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4,
                field: 500}
        with pytest.raises(ProxyException) as refused:
            run(policy.async_pre_call_hook(key("initech"), None, data, "acompletion"))
        assert refused.value.message.startswith(f"{field} 500 exceeds the 128 tokens")
    out = run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "messages": [
        {"role": "user", "content": "hi"}], "max_completion_tokens": 100}, "acompletion"))
    assert out["max_completion_tokens"] == 100 and "max_tokens" not in out


@pytest.mark.parametrize(("tenant", "model"), [("acme", "globex-legal"), ("globex", "acme-support"),
                                               ("initech", "acme-support"), ("acme", "tiny,micro"), ("acme", "hosted_vllm/tiny"),
                                               ("acme", None), ("acme", "gpt-4o")])
def test_a_model_outside_the_tenants_list_is_a_403_before_admission(policy, tenant, model):
    """The one rule, on the model LiteLLM resolved (here as the front door cannot see it: from a query string)."""
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key(tenant), None, {"model": model, "prompt": "x"}, "atext_completion"))
    assert (refused.value.code, refused.value.type) == ("403", "permission_denied")
    assert f"model {model!r} is not available for this API key (tenant {tenant})" in refused.value.message
    assert refused.value.headers[errors.ERROR_HEADER] == "permission_denied"
    assert run(policy.ledger.counts(ledger.tenant_set(tenant)))[0] == [0], "nothing was admitted"


def test_a_tenants_key_is_served_chat_and_text_completions_only(policy):
    for call_type in ("aembedding", "agenerate_content", "anthropic_messages", "aresponses"):
        with pytest.raises(ProxyException) as refused:
            run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "input": "x"}, call_type))
        assert refused.value.code == "403" and f"not {call_type}" in refused.value.message


def test_the_plugins_own_metadata_keys_are_never_taken_from_the_request(policy):
    forged = {tp.REROUTED_FROM: "tiny -> micro (saturated)", tp.REQUEST_ID: "another", tp.HELD_SLOTS: ["x"],
              "tenantry_anything": 1, "tags": ["kept"]}
    data = {"model": "tiny", "prompt": "x", "metadata": dict(forged), "litellm_metadata": dict(forged)}
    out = run(policy.async_pre_call_hook(key("acme"), None, data, "atext_completion"))
    assert run(policy.async_post_call_response_headers_hook(out, None, None)) is None
    assert out["metadata"][tp.REQUEST_ID] != "another" and "tenantry_anything" not in out["metadata"]
    assert out["litellm_metadata"] == {"tags": ["kept"]}


def test_prompt_cap(policy):
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None,
                                       {"model": "tiny", "messages": [{"role": "user", "content": "word " * 200}]},
                                       "atext_completion"))
    assert refused.value.code == "400" and "the spot tier allows 50" in refused.value.message


# --- admission with a real Redis -----------------------------------------------------------


def test_concurrency_is_capped_across_replicas_and_released_when_done(policy, redis_url):
    import redis.asyncio as aioredis

    other_replica = tp.TenantPolicy(policy.settings, redis=aioredis.from_url(redis_url), metrics=policy.metrics)
    admitted = []
    for replica in (policy, other_replica, policy):  # globex may have 3 in flight, whichever replica serves it
        admitted.append(run(replica.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion")))
    with pytest.raises(ProxyException) as refused:
        run(other_replica.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))
    assert refused.value.code == "429" and refused.value.headers["Retry-After"] == "1"
    run(policy.async_log_success_event({"litellm_params": {"metadata": admitted[0]["metadata"]}}, None, 0, 0))
    assert run(other_replica.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))


def _admit_globex_to_its_limit(policy) -> list[dict]:
    admitted = [run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))
                for _ in range(3)]
    with pytest.raises(ProxyException):
        run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))
    return admitted


def test_a_response_releases_its_slot_before_it_is_sent(policy):
    admitted = _admit_globex_to_its_limit(policy)
    assert run(policy.async_post_call_success_hook(admitted[0], key("globex"), object())) is None  # response unchanged
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))


def test_a_stream_releases_its_slot_when_litellm_logs_its_end(policy):
    admitted = _admit_globex_to_its_limit(policy)
    run(policy.async_log_success_event({"litellm_params": {"metadata": admitted[0]["metadata"]}}, None, 0, 0))
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))


def test_a_failed_request_releases_its_slot(policy):
    admitted = _admit_globex_to_its_limit(policy)
    run(policy.async_post_call_failure_hook(admitted[0], RuntimeError("engine gone"), key("globex")))
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))


def test_a_request_litellm_retries_on_a_fallback_holds_one_claim_and_leaves_none(policy, redis_url):
    """LiteLLM's own rate limiter can refuse a request after this hook admitted it;
    LiteLLM then runs the hooks again on a fresh copy for each fallback model,
    drops the copies, and reports the failure with the first one."""
    import redis

    async def one_request_refused_by_litellm_after_fallbacks() -> None:
        first = {"model": "micro", "prompt": "x"}
        await policy.async_pre_call_hook(key("globex"), None, first, "atext_completion")
        for fallback in ("micro", "micro"):  # the copies LiteLLM retries (here: the same engine again)
            await policy.async_pre_call_hook(key("globex"), None, {"model": fallback, "prompt": "x"}, "atext_completion")
            tenant_entries = redis.Redis.from_url(redis_url).zcard(ledger.tenant_set("globex"))
            assert tenant_entries == 1, "each retry must give back what the previous attempt took"
        await policy.async_post_call_failure_hook(first, RuntimeError("rate limited"), key("globex"))

    run(one_request_refused_by_litellm_after_fallbacks())
    client = redis.Redis.from_url(redis_url)
    assert [k for k in client.keys("*inflight*") if client.zcard(k)] == []


def test_at_its_limit_a_tenant_waits_briefly_for_a_slot(policy):
    admitted = _admit_globex_to_its_limit(policy)  # the fourth is refused after the wait: nothing ended meanwhile
    assert release_once_full_and_ask(policy, admitted)["metadata"][tp.REQUEST_ID]


def test_without_a_wait_the_limit_refuses_at_once(policy):
    set_admission(policy, wait_at_concurrency_limit_seconds=0)
    admitted = _admit_globex_to_its_limit(policy)
    with pytest.raises(ProxyException) as refused:
        release_once_full_and_ask(policy, admitted)
    assert "its limit is 3" in refused.value.message
    assert tp.SHED_HEADER not in refused.value.headers  # the tenant's own limit, not a shed for capacity
    assert shed("globex", "best-effort", "concurrency") == 0  # and never counted as the platform's refusal


def test_a_flood_beyond_the_limit_is_refused_at_once_beyond_one_waiter_per_slot(policy):
    _admit_globex_to_its_limit(policy)  # globex: limit 3, all taken
    set_admission(policy, wait_at_concurrency_limit_seconds=600)  # the waiters wait until cancelled

    async def flood():
        asks = [asyncio.ensure_future(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"},
                                                                 "atext_completion")) for _ in range(5)]
        done: set = set()
        while len(done) < 2:
            finished, _ = await asyncio.wait(asks, timeout=60, return_when=asyncio.FIRST_COMPLETED)
            assert finished, "the asks beyond one waiter per slot must be refused without waiting"
            done |= finished
        assert len(done) == 2 and all("its limit is 3" in task.exception().message for task in done)
        assert policy._waiting_at_limit["globex"] == 3
        for task in asks:
            task.cancel()
        await asyncio.gather(*asks, return_exceptions=True)
        assert policy._waiting_at_limit["globex"] == 0

    run(flood())


def test_losing_every_race_is_a_429_not_an_overcommit(policy, monkeypatch):
    async def always_taken(request_id, limits):
        return ledger.shared_set("micro")  # the engine's slot, taken by another replica every time

    monkeypatch.setattr(policy.ledger, "claim_or_full", always_taken)
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))
    assert refused.value.code == "429" and "slots were taken" in refused.value.message


def test_losing_the_tenants_own_last_slot_to_another_replica_is_its_own_limit_not_contention(policy, monkeypatch):
    real = policy.ledger.claim_or_full
    limit = policy.settings.tenants["globex"].max_concurrency

    async def another_replica_first(request_id, limits):  # its own requests elsewhere took its last slots
        for i in range(limit):
            await real(f"elsewhere-{i}", {ledger.tenant_set("globex"): limit})
        return ledger.tenant_set("globex")

    monkeypatch.setattr(policy.ledger, "claim_or_full", another_replica_first)
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))
    assert f"has {limit} requests in flight, its limit is {limit}" in refused.value.message
    assert tp.SHED_HEADER not in (refused.value.headers or {})  # not a capacity shed


def test_reserved_slots_stay_free_for_their_owner(policy):
    # tiny runs 8 sequences; acme reserves 4 of them; globex (3) and initech (4) share the other 4.
    for _ in range(3):
        run(policy.async_pre_call_hook(key("globex"), None, {"model": "globex-legal", "prompt": "x"}, "atext_completion"))
    run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert "unreserved slots are busy" in refused.value.message
    for _ in range(4):
        run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))


def test_a_saturated_engine_sheds_spot_first(policy):
    policy.metrics._states["tiny"] = seen(8, 2, 0.5, at=time.time())
    before = shed("initech", "spot", "saturated")
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.code == "429" and "spot traffic paused" in refused.value.message
    assert refused.value.headers["Retry-After"] == "10"
    assert refused.value.headers[tp.SHED_HEADER] == "saturated"
    assert shed("initech", "spot", "saturated") == before + 1  # counted as the platform's refusal, once
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))


def test_spot_pauses_after_any_other_tier_arrives_across_replicas(policy, redis_url):
    import redis
    import redis.asyncio as aioredis

    set_admission(policy, spot_pause_after_others_seconds=0.6)
    replica = tp.TenantPolicy(policy.settings, redis=aioredis.from_url(redis_url), metrics=policy.metrics)
    spot = {"model": "tiny", "prompt": "x"}
    assert run(replica.async_pre_call_hook(key("initech"), None, dict(spot), "atext_completion"))  # nobody else yet
    for other in ("acme", "globex"):
        run(policy.async_pre_call_hook(key(other), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
        with pytest.raises(ProxyException) as refused:
            run(replica.async_pre_call_hook(key("initech"), None, dict(spot), "atext_completion"))
        assert refused.value.code == "429" and refused.value.headers["Retry-After"] == "1"
        assert "engine tiny serving guaranteed or best-effort traffic" in refused.value.message
        assert refused.value.headers[tp.SHED_HEADER] == "others-active"
        if other == "acme":  # only the engine the others asked for pauses
            assert run(policy.async_pre_call_hook(key("initech"), None, {"model": "micro", "prompt": "x"}, "atext_completion"))
        # The pause is the mark's life in Redis, shared by the replicas: set for the pause's 600 ms. Its end is
        # Redis expiring the mark, done here at once rather than waited for (no test waits on a timer).
        mark = redis.Redis.from_url(redis_url)
        assert 0 < mark.pttl(ledger.others_recent_key("tiny")) <= 600
        mark.delete(ledger.others_recent_key("tiny"))
        assert run(replica.async_pre_call_hook(key("initech"), None, dict(spot), "atext_completion"))


def test_a_refused_guaranteed_request_still_pauses_spot(policy, redis_url):
    import redis

    set_admission(policy, spot_pause_after_others_seconds=30, wait_at_concurrency_limit_seconds=0)
    for _ in range(4):
        run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    client = redis.Redis.from_url(redis_url)
    client.delete(ledger.others_recent_key("tiny"))
    with pytest.raises(ProxyException):  # acme at its limit: refused, and still marks the engine
        run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert client.exists(ledger.others_recent_key("tiny"))


def test_failing_metrics_refuse_spot_but_never_guaranteed(policy):
    import httpx

    policy.metrics._states.clear()
    policy.metrics.cache_seconds = 0
    tiny = dataclasses.replace(policy.settings.engines["tiny"], metrics_urls=("http://127.0.0.1:9/metrics",))
    policy.metrics.settings = dataclasses.replace(policy.settings, engines={**policy.settings.engines, "tiny": tiny})
    policy.metrics.client = httpx.AsyncClient(timeout=0.2)
    before = {tier: failsafe("tiny", tier, "metrics") for tier in ("guaranteed", "best-effort", "spot")}
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert "metrics unavailable" in refused.value.message
    assert run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    # Each decision taken on an unknown load counts, whatever it decided (GatewayPolicyFailSafe reads it).
    assert {tier: failsafe("tiny", tier, "metrics") - n for tier, n in before.items()} == \
        {"guaranteed": 1, "best-effort": 1, "spot": 1}


def test_an_engine_idle_for_a_while_is_scraped_again_before_spot_is_judged(policy):
    # The last state is older than metrics_max_age_seconds because nobody asked for
    # the engine, not because its metrics failed: spot must not be refused as "load unknown".
    policy.metrics.cache_seconds = 1
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time() - 60)
    scrapes = []

    async def fetch(engine):
        scrapes.append(engine)
        return 0.0, 0.0, 0.0, 1, time.time()

    policy.metrics._fetch = fetch
    assert run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert scrapes == ["tiny"]


def test_spot_is_judged_on_the_engines_load_now_best_effort_on_a_recent_one(policy):
    policy.metrics.cache_seconds = 1
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time() - 3)  # idle a moment ago

    async def busy_now(engine):
        return 8.0, 6.0, 0.5, 1, time.time()

    policy.metrics._fetch = busy_now
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    run(policy.metrics._refreshes["tiny"])  # the refresh globex's request started in the background
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time() - 3)
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.headers[tp.SHED_HEADER] == "saturated"


def test_spot_is_refused_as_unknown_when_the_scrape_it_waited_for_fails(policy):
    import httpx

    policy.metrics.cache_seconds = 1
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time() - 3)  # idle a moment ago

    async def too_busy_to_answer(engine):
        raise httpx.ReadTimeout("a saturated engine's /metrics")

    policy.metrics._fetch = too_busy_to_answer
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.headers[tp.SHED_HEADER] == "metrics"


def test_a_guaranteed_request_never_waits_for_a_scrape_however_old_the_state(policy):
    policy.metrics.cache_seconds = 1
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time() - 60)
    answer = asyncio.Event()

    async def unanswered(engine):  # a busy engine's /metrics, answering only when the test says so
        await answer.wait()
        return 0.0, 0.0, 0.0, 1, time.time()

    policy.metrics._fetch = unanswered
    try:
        assert run(asyncio.wait_for(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"},
                                                               "atext_completion"), timeout=30))
    finally:
        answer.set()
        run(policy.metrics._refreshes["tiny"])


def test_the_smoke_check_reads_the_header_the_plugin_sends():
    from tenantry.local import smoke

    assert smoke.SHED_HEADER == tp.SHED_HEADER
