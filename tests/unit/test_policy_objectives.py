"""What the tenant plugin tells a kv-aware engine's endpoint picker: the tier's InferenceObjective on the engine
that finally serves the request (after an overload reroute too) and the tenant as the picker's fairness flow;
whatever a client sent under the picker's headers, in any case or under their deprecated names, is dropped, so
no tenant names a more critical objective. An engine behind its Service gets neither. Against a real Redis."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.unit.policy_plugin import key, run, seen

OBJECTIVE, FAIRNESS = "x-llm-d-inference-objective", "x-llm-d-inference-fairness-id"
FORGED = {"X-LLM-D-Inference-Objective": "tiny-guaranteed", "x-gateway-inference-objective": "tiny-guaranteed",
          "X-Gateway-Inference-Fairness-Id": "acme", "x-llm-d-inference-fairness-id": "acme", "x-trace": "7"}


@pytest.fixture
def kv_aware(policy):
    """tiny and micro are kv-aware, each with its own objective per tier; globex falls back from tiny to micro."""
    engines = {name: dataclasses.replace(e, objectives={tier: f"{name}-{tier}" for tier in
                                                         ("guaranteed", "best-effort", "spot")})
               for name, e in policy.settings.engines.items() if name in ("tiny", "micro")}
    globex = dataclasses.replace(policy.settings.tenants["globex"], overload_fallback=("micro",))
    policy.settings = dataclasses.replace(
        policy.settings, engines={**policy.settings.engines, **engines},
        tenants={**policy.settings.tenants, "globex": globex},
        admission=dataclasses.replace(policy.settings.admission, wait_at_concurrency_limit_seconds=0))
    return policy


def test_the_tiers_objective_and_the_tenants_flow_replace_what_the_client_sent(kv_aware):
    data = run(kv_aware.async_pre_call_hook(key("initech"), None, {"model": "tiny", "prompt": "x",
                                                                    "extra_headers": dict(FORGED)}, "atext_completion"))
    assert data["extra_headers"] == {"x-trace": "7", "X-Vllm-Priority": "100", OBJECTIVE: "tiny-spot",
                                     FAIRNESS: "initech"}


def test_a_rerouted_request_names_the_objective_of_the_engine_that_serves_it(kv_aware):
    kv_aware.metrics._states["tiny"] = seen(running=8, waiting=100, kv_usage=1.0, at=time.time())
    data = run(kv_aware.async_pre_call_hook(key("globex"), None, {"model": "globex-legal", "prompt": "x"}, "atext_completion"))
    assert data["model"] == "micro"
    assert (data["extra_headers"][OBJECTIVE], data["extra_headers"][FAIRNESS]) == ("micro-best-effort", "globex")


def test_an_engine_behind_its_service_gets_no_picker_header_not_even_the_clients(policy):
    data = run(policy.async_pre_call_hook(key("acme"), None, {"model": "tiny", "prompt": "x",
                                                              "extra_headers": dict(FORGED)}, "atext_completion"))
    assert data["extra_headers"] == {"x-trace": "7", "X-Vllm-Priority": "0"}
