"""The plugin's count of what each tenant got against its objectives: what the
burn-rate alerts divide (tenantry_tenant_slo_misses_total / tenantry_tenant_requests_total)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from tests.unit.policy_plugin import local_settings, outcomes

# stacks/local.yaml: acme (guaranteed) 2000 ms to first token, 250 ms between tokens; tiny serves acme-support.
ACME = {"tenant": "acme", "tier": "guaranteed", "engine": "tiny"}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def payload(ttft: float, seconds_after_first: float, tokens: int, *, stream: bool = True, alias: str = "acme",
            model: str = "acme-support", prompt_tokens: int = 200) -> dict:
    return {"metadata": {"user_api_key_team_alias": alias}, "model_group": model, "stream": stream,
            "startTime": 1000.0, "completionStartTime": 1000.0 + ttft, "endTime": 1000.0 + ttft + seconds_after_first,
            "completion_tokens": tokens, "prompt_tokens": prompt_tokens}


@pytest.fixture(scope="module")
def recorder() -> outcomes.Outcomes:
    return outcomes.Outcomes(local_settings())


def counts() -> dict[str, float]:
    return {"requests": sample("tenantry_tenant_requests_total", **ACME),
            **{o: sample("tenantry_tenant_slo_misses_total", **ACME, objective=o) for o in ("ttft", "itl", "any")},
            "prompt": sample("tenantry_tenant_prompt_tokens_total", **ACME),
            "cached": sample("tenantry_tenant_cached_prompt_tokens_total", **ACME)}


def delta(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in counts().items()}


def test_a_request_within_both_objectives_counts_but_misses_nothing(recorder):
    before = counts()
    # 1.9 s to the first token; 49 tokens over 9.6 s after it: a mean gap of 0.2 s.
    recorder.record(payload(1.9, 9.6, 49), {"usage": {"prompt_tokens_details": {"cached_tokens": 192}}})
    assert delta(before) == {"requests": 1, "ttft": 0, "itl": 0, "any": 0, "prompt": 200, "cached": 192}


def test_a_slow_first_token_and_slow_gaps_are_each_a_miss_and_one_miss_of_any(recorder):
    before = counts()
    recorder.record(payload(2.1, 1.0, 5), None)  # TTFT over 2 s; gaps 0.25 s: not over
    recorder.record(payload(0.5, 3.0, 11), None)  # gaps 0.3 s: over 0.25 s
    recorder.record(payload(2.5, 6.0, 11), None)  # both
    assert delta(before) == {"requests": 3, "ttft": 2, "itl": 2, "any": 3, "prompt": 600, "cached": 0}


def test_an_answer_not_streamed_has_no_inter_token_latency(recorder):
    before = counts()
    recorder.record(payload(1.0, 0.0, 48, stream=False), None)
    assert delta(before)["itl"] == 0 and delta(before)["requests"] == 1


def test_requests_of_no_tenant_or_no_engine_of_the_plan_are_not_counted(recorder):
    before = counts()
    recorder.record(payload(9.0, 1.0, 5, alias="someone-else"), None)
    recorder.record(payload(9.0, 1.0, 5, model="gpt-4o"), None)
    recorder.record(None, None)
    assert delta(before) == dict.fromkeys(before, 0)


def test_every_objective_is_a_bucket_boundary_of_the_latency_histograms(recorder):
    recorder.record(payload(1.0, 1.0, 5), None)  # a series, so its buckets are in the registry
    buckets = {s.labels["le"] for m in REGISTRY.collect() if m.name == "tenantry_tenant_ttft_seconds"
               for s in m.samples if s.name.endswith("_bucket")}
    assert {"2.0", "5.0", "20.0"} <= buckets  # acme, globex, initech
