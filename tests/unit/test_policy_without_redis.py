"""The tenant-policy plugin without Redis (docs/platform.md: Admission, fail-safe): each tier's
answer, and a guaranteed tenant held to its concurrency on each replica alone. Redis here is a
port nothing listens on."""

from __future__ import annotations

import pytest
from litellm.proxy._types import ProxyException

from tests.unit.policy_plugin import engine_metrics, failsafe, key, local_settings, run, shed
from tests.unit.policy_plugin import plugin as tp


def test_a_lost_redis_fails_safe_per_tier():
    import redis.asyncio as aioredis

    settings = local_settings()
    gone = tp.TenantPolicy(settings, redis=aioredis.Redis(host="127.0.0.1", port=9, socket_timeout=0.2),
                           metrics=engine_metrics.EngineMetrics(settings))
    before = failsafe("tiny", "guaranteed", "redis"), failsafe("tiny", "spot", "redis")
    shed_before = shed("initech", "spot", "redis")
    assert run(gone.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    with pytest.raises(ProxyException) as refused:
        run(gone.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.code == "429" and "admission state unavailable" in refused.value.message
    assert refused.value.headers[tp.SHED_HEADER] == "redis"
    assert shed("initech", "spot", "redis") == shed_before + 1
    assert (failsafe("tiny", "guaranteed", "redis"), failsafe("tiny", "spot", "redis")) == (before[0] + 1, before[1] + 1)


def test_without_redis_a_guaranteed_tenant_is_held_to_its_concurrency_on_each_replica():
    import redis.asyncio as aioredis

    settings = local_settings()
    limit = settings.tenants["acme"].max_concurrency
    gone = tp.TenantPolicy(settings, redis=aioredis.Redis(host="127.0.0.1", port=9, socket_timeout=0.2),
                           metrics=engine_metrics.EngineMetrics(settings))
    admitted = [run(gone.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
                for _ in range(limit)]
    with pytest.raises(ProxyException) as refused:
        run(gone.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.code == "429" and tp.SHED_HEADER not in (refused.value.headers or {})
    assert f"has {limit} requests in flight, its limit is {limit}" in refused.value.message
    assert "Redis is unavailable" in refused.value.message
    run(gone.async_log_success_event({"metadata": admitted[0]["metadata"]}, None, None, None))  # one ends
    assert run(gone.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    other_replica = tp.TenantPolicy(settings, redis=aioredis.Redis(host="127.0.0.1", port=9, socket_timeout=0.2),
                                    metrics=gone.metrics)
    assert run(other_replica.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
