"""The tenant-policy plugin's fixtures, shared by the modules that drive its hook against a real Redis
(test_tenant_policy.py, test_policy_tier_slots.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.unit.policy_plugin import engine_metrics, local_settings, redis_server, seen
from tests.unit.policy_plugin import plugin as tp


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(autouse=True)
def _empty_redis(request):
    if "redis_url" in request.fixturenames:
        import redis

        redis.Redis.from_url(request.getfixturevalue("redis_url")).flushall()


@pytest.fixture
def policy(redis_url):
    import redis.asyncio as aioredis

    settings = local_settings()
    initech = dataclasses.replace(settings.tenants["initech"], max_prompt_tokens=50)
    # The local stack pauses spot after the others' requests; these tests count
    # slots side by side, so the pause is off except where a test turns it on.
    settings = dataclasses.replace(settings, tenants={**settings.tenants, "initech": initech},
                                   admission=dataclasses.replace(settings.admission, spot_pause_after_others_seconds=0))
    client = aioredis.from_url(redis_url)
    metrics = engine_metrics.EngineMetrics(settings)
    metrics.cache_seconds = 3600  # the engines' load is seeded below, not scraped
    for engine in settings.engines:
        metrics._states[engine] = seen(0, 0, 0.0, at=time.time())
    return tp.TenantPolicy(settings, redis=client, metrics=metrics)
