"""A tier's cap on an engine (tiers.<tier>.max_engine_slots), through the plugin's hook against a real Redis,
as tests/unit/test_tenant_policy.py runs it (the fixtures in tests/unit/conftest.py)."""

from __future__ import annotations

import dataclasses

import pytest
from litellm.proxy._types import ProxyException

from tests.unit.policy_plugin import key, run
from tests.unit.policy_plugin import plugin as tp


def _cap_tier(policy, engine: str, **caps: int) -> None:
    """The engine's tier caps from here on, as if the gateway had restarted with them."""
    engines = {**policy.settings.engines,
               engine: dataclasses.replace(policy.settings.engines[engine], tier_slots=dict(caps))}
    policy.settings = dataclasses.replace(policy.settings, engines=engines)


def test_a_capped_tier_runs_at_most_its_cap_across_replicas_and_its_slots_come_back(policy, redis_url):
    import redis.asyncio as aioredis

    _cap_tier(policy, "tiny", spot=2)  # initech (spot, 4 in flight at most) on tiny's 4 unreserved slots
    other_replica = tp.TenantPolicy(policy.settings, redis=aioredis.from_url(redis_url), metrics=policy.metrics)
    admitted = [run(replica.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
                for replica in (policy, other_replica)]
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.code == "429" and refused.value.headers[tp.SHED_HEADER] == "tier-slots"
    assert "spot traffic has 2 of the 2 slots its tier may use" in refused.value.message
    # The cap is spot's alone: best-effort still takes the unreserved slots left, and guaranteed its own.
    assert run(policy.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    run(policy.async_log_success_event({"litellm_params": {"metadata": admitted[0]["metadata"]}}, None, 0, 0))
    assert run(other_replica.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))


def test_a_cap_of_zero_keeps_the_tier_off_the_engine(policy):
    _cap_tier(policy, "tiny", spot=0)
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.headers[tp.SHED_HEADER] == "tier-slots"
    _cap_tier(policy, "tiny")
    assert run(policy.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
