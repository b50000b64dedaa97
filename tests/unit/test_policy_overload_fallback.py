"""A tenant's overload fallback in the plugin's hook, against a real Redis: a request its engine's capacity
would refuse is served by the next of its fallback models that admits it, said so in a header and counted;
its own limits are never routed around."""

from __future__ import annotations

import dataclasses
import time

import pytest
from litellm.proxy._types import ProxyException

from tests.unit.policy_plugin import key, run, seen
from tests.unit.policy_plugin import plugin as tp

SATURATED = dict(running=8, waiting=100, kv_usage=1.0)


@pytest.fixture
def rerouting(policy):
    """globex (best-effort, on tiny and micro) falls back to micro; without waiting at its limit."""
    globex = dataclasses.replace(policy.settings.tenants["globex"], overload_fallback=("micro",))
    policy.settings = dataclasses.replace(
        policy.settings, tenants={**policy.settings.tenants, "globex": globex},
        admission=dataclasses.replace(policy.settings.admission, wait_at_concurrency_limit_seconds=0))
    return policy


def _rerouted(to: str, reason: str) -> float:
    return tp.REROUTED.labels(tenant="globex", tier="best-effort", engine="tiny", to=to, reason=reason)._value.get()


def test_a_request_its_engine_would_shed_is_served_by_the_fallback_and_says_so(rerouting):
    before = _rerouted("micro", "saturated")
    rerouting.metrics._states["tiny"] = seen(**SATURATED, at=time.time())
    data = run(rerouting.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert data["model"] == "micro"
    assert run(rerouting.async_post_call_response_headers_hook(data, key("globex"), None)) == {
        tp.REROUTE_HEADER: "tiny -> micro (saturated)"}
    assert _rerouted("micro", "saturated") == before + 1
    # Its slot is micro's, released as any other.
    assert any("micro" in held for held in data["metadata"][tp.HELD_SLOTS])
    run(rerouting.async_post_call_success_hook(data, key("globex"), None))
    assert tp.HELD_SLOTS not in data["metadata"]


def test_an_adapter_request_falls_back_to_the_base_model_of_the_fallback(rerouting):
    rerouting.metrics._states["tiny"] = seen(**SATURATED, at=time.time())
    data = run(rerouting.async_pre_call_hook(key("globex"), None, {"model": "globex-legal", "prompt": "x"}, "atext_completion"))
    assert data["model"] == "micro" and data["metadata"][tp.REROUTED_FROM] == "globex-legal -> micro (saturated)"


def test_a_request_its_engine_admits_is_not_rerouted(rerouting):
    data = run(rerouting.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert data["model"] == "tiny" and tp.REROUTED_FROM not in data["metadata"]
    assert run(rerouting.async_post_call_response_headers_hook(data, key("globex"), None)) is None


def test_the_tenants_own_limit_is_never_routed_around(rerouting):
    for _ in range(3):  # globex's max_concurrency
        run(rerouting.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    with pytest.raises(ProxyException) as refused:
        run(rerouting.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert "its limit is 3" in refused.value.message and tp.SHED_HEADER not in (refused.value.headers or {})


def test_when_the_fallback_is_full_too_the_first_refusal_stands(rerouting):
    for engine in ("tiny", "micro"):
        rerouting.metrics._states[engine] = seen(**SATURATED, at=time.time())
    with pytest.raises(ProxyException) as refused:
        run(rerouting.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.headers[tp.SHED_HEADER] == "saturated" and "engine tiny saturated" in refused.value.message


def test_a_tenant_without_an_overload_fallback_is_refused_as_before(policy):
    policy.metrics._states["tiny"] = seen(**SATURATED, at=time.time())
    with pytest.raises(ProxyException) as refused:
        run(policy.async_pre_call_hook(key("globex"), None, {"model": "tiny", "prompt": "x"}, "atext_completion"))
    assert refused.value.headers[tp.SHED_HEADER] == "saturated"
