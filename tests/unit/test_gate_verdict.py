"""The gate's verdict, scenario by scenario, on requests made up here: every
path that passes or fails a tenant or a check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tenantry.gate.profiles import request_body, traffic_classes
from tenantry.gate.records import Record, read_records, retry_after_seconds, write_records
from tenantry.gate.scenario_model import Fault, ScenarioError
from tenantry.gate.scenarios import SCENARIOS, scenario
from tenantry.gate.verdict import percentile, priority_inversions, verdict
from tenantry.stacks import plan_stack

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan():
    return plan_stack(ROOT / "stacks" / "local.yaml")


def request(tenant: str, tier: str, sent: float, ttft: float | None = 0.1, status: int = 200, gaps=(0.02,) * 9,
            error: str = "", target: str = "tiny", streamed: bool = True, **extra) -> Record:
    e2e = (ttft or 0) + sum(gaps)
    return Record(tenant, tier, "chat", target, "steady", sent, streamed, status, e2e, ttft if status == 200 else None,
                  list(gaps) if status == 200 else [], 10 if status == 200 else 0, 50, error=error, **extra)


def steady_records(count: int = 40) -> list[Record]:
    return [request(t, tier, i * 0.5) for i in range(count)
            for t, tier in (("acme", "guaranteed"), ("globex", "best-effort"), ("initech", "spot"))]


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile(list(range(101)), 0.95) == 95
    assert percentile([], 0.95) is None


def test_steady_run_within_every_slo_passes(plan):
    steady = scenario("steady", plan, short=True)
    result = verdict(steady_records(), plan, steady)
    assert result.passed
    assert {f.passed for f in result.tenants.values()} == {True}
    acme = result.tenants["acme"]
    assert acme.requests == 40 and acme.ttft_p95 == pytest.approx(0.1) and acme.itl_p95 == pytest.approx(0.02)
    assert acme.goodput == pytest.approx(40 / steady.seconds)


def test_slow_first_tokens_fail_the_tenant_with_the_figure_and_the_target(plan):
    records = steady_records()
    records += [request("acme", "guaranteed", 30 + i, ttft=4.0) for i in range(10)]
    result = verdict(records, plan, scenario("steady", plan, short=True))
    assert not result.passed
    assert result.tenants["acme"].reasons == ["p95 time to first token 4000 ms > 2000 ms"]
    assert result.tenants["globex"].passed


def test_slow_tokens_fail_on_inter_token_latency(plan):
    records = steady_records() + [request("globex", "best-effort", 1, gaps=(0.9,) * 20)]
    result = verdict(records, plan, scenario("steady", plan, short=True))
    assert "p95 inter-token latency 900 ms > 400 ms" in result.tenants["globex"].reasons


def test_errors_count_but_a_tenants_own_429s_do_not(plan):
    records = steady_records()
    records += [request("globex", "best-effort", 2, status=429, error="Rate limit exceeded") for _ in range(30)]
    records += [request("globex", "best-effort", 2, status=429, error="engine tiny saturated (3 waiting, KV "
                        "cache 10%): best-effort traffic above reservations paused", shed="saturated") for _ in range(5)]
    result = verdict(records, plan, scenario("steady", plan, short=True))
    globex = result.tenants["globex"]
    assert globex.passed and globex.errors == 0 and globex.quota_429 == 30 and globex.shed_429 == 5
    records += [request("globex", "best-effort", 3, status=502, error="bad gateway") for _ in range(3)]
    globex = verdict(records, plan, scenario("steady", plan, short=True)).tenants["globex"]
    assert not globex.passed and globex.errors == 3 and "error rate 7.0% > 5.0% (3 of 43)" in globex.reasons


def test_spot_paused_throughout_is_reported_not_failed_but_spot_failing_is_not_excused(plan):
    paused = "engine tiny serving guaranteed or best-effort traffic (within the last 10 s): spot traffic paused"
    records = [r for r in steady_records() if r.tenant != "initech"]
    records += [request("initech", "spot", i, status=429, error=paused, shed="others-active") for i in range(5)]
    result = verdict(records, plan, scenario("steady", plan, short=True))
    initech = result.tenants["initech"]
    assert result.passed and initech.passed is None and initech.shed_429 == 5
    assert initech.reasons == ["admission paused it throughout (5 refused): spot runs only on idle capacity"]
    records.append(request("initech", "spot", 6, status=429, error="Rate limit reached"))  # its own quota
    initech = verdict(records, plan, scenario("steady", plan, short=True)).tenants["initech"]
    assert initech.passed is False and initech.reasons == ["no request succeeded (6 sent)"]


def test_a_429_is_a_shed_for_capacity_only_when_the_gateway_says_so(plan):
    worded_like_a_shed = request("globex", "best-effort", 2, status=429, error="engine tiny saturated")
    records = steady_records() + [worded_like_a_shed, request("globex", "best-effort", 2, status=429,
                                                              error="Rate limit reached", shed="saturated")]
    globex = verdict(records, plan, scenario("steady", plan, short=True)).tenants["globex"]
    assert globex.quota_429 == 1 and globex.shed_429 == 1


def test_the_gate_reads_the_headers_the_plugin_sends():
    from tenantry.gate.verdict import REROUTE_HEADER, SHED_HEADER
    from tenantry.gateway import tenant_policy as tp

    assert SHED_HEADER == tp.SHED_HEADER and REROUTE_HEADER == tp.REROUTE_HEADER


def test_a_rerouted_answer_is_served_by_and_priced_at_the_fallback_whatever_model_it_names():
    """LiteLLM names the model asked for on the answer; the plugin's header names the one that served it."""
    from dataclasses import replace

    from tenantry.gate.records import Record
    from tenantry.showback import model_prices

    prices = model_prices(plan_stack("local"))  # tiny and micro cost the same on the local stack's CPU: not here
    prices["micro"] = replace(prices["micro"], usd_per_output_token=2 * prices["micro"].usd_per_output_token)
    answer = {"model": "tiny", "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
    record = Record(tenant="globex", tier="best-effort", profile="chat", target="tiny", stage="flood", sent=0.0,
                    streamed=False, status=200, e2e=1.0, rerouted="tiny -> micro (shared-slots)")
    record.read_usage(answer, prices)
    assert record.served_by == "micro" and record.cost_usd == prices["micro"].cost(100, 20) != prices["tiny"].cost(100, 20)
    plain = Record(tenant="globex", tier="best-effort", profile="chat", target="tiny", stage="flood", sent=0.0,
                   streamed=False, status=200, e2e=1.0)
    plain.read_usage(answer, prices)
    assert plain.served_by == "tiny" and plain.cost_usd == prices["tiny"].cost(100, 20)


def test_a_guaranteed_tenant_refused_by_admission_is_an_error(plan):
    records = steady_records() + [request("acme", "guaranteed", 5, status=429,
                                          error="engine tiny: all 4 unreserved slots are busy; guaranteed traffic waits",
                                          shed="shared-slots")]
    acme = verdict(records, plan, scenario("steady", plan, short=True)).tenants["acme"]
    assert acme.errors == 1 and not acme.passed


def test_a_tenant_that_got_nothing_through_fails(plan):
    records = [r for r in steady_records() if r.tenant != "initech"]
    records += [request("initech", "spot", 1, status=0, error="ConnectionError")]
    initech = verdict(records, plan, scenario("steady", plan, short=True)).tenants["initech"]
    assert not initech.passed and initech.reasons[0] == "no request succeeded (1 sent)"


def test_nothing_measured_never_passes(plan):
    assert not verdict([], plan, scenario("steady", plan, short=True)).passed


def test_noisy_neighbour_judges_the_victims_not_the_aggressor(plan):
    noisy = scenario("noisy-neighbour", plan, short=True)
    assert noisy.subject["aggressor"] == "initech"
    flood = noisy.stages[1].loads["initech"]
    # 5x concurrency 4; 5x its rate: 600 RPM, or 120,000 TPM at 300 + 128 tokens a request, whichever binds
    assert (flood.users, flood.rate) == (20, pytest.approx(5 * min(600, 120_000 / 428) / 60))
    records = [r for r in steady_records() if r.tenant == "acme"]
    records += [request("initech", "spot", 35, ttft=60) for _ in range(5)]
    result = verdict(records, plan, noisy)
    assert result.passed and result.tenants["initech"].passed is None
    assert result.tenants["globex"].judged is False  # no load in this scenario


def test_over_quota_passes_only_when_the_429s_are_the_over_tenants(plan):
    over = scenario("over-quota", plan, short=True)
    records = steady_records() + [request("globex", "best-effort", 9, status=429, error="Rate limit reached")]
    assert verdict(records, plan, over).passed
    check = verdict(steady_records(), plan, over).checks[0]
    assert not check.passed and "globex went over its quota and got no 429" in check.detail
    records.append(request("acme", "guaranteed", 9, status=429, error="tenant acme has 4 requests in flight, "
                           "its limit is 4"))
    check = verdict(records, plan, over).checks[0]
    assert not check.passed and "acme 1" in check.detail


def test_priority_inversion_needs_both_queued_and_the_lower_tier_first(plan):
    gaps = (0.05,) * 10
    spot_first = request("initech", "spot", 0.0, ttft=3.0, gaps=gaps)      # queued until 3.0 s
    acme_later = request("acme", "guaranteed", 1.0, ttft=1.0, gaps=gaps)   # first token at 2.0 s: in order
    assert priority_inversions([spot_first, acme_later], plan) == (1, [])
    acme_overtaken = request("acme", "guaranteed", 1.0, ttft=6.0, gaps=gaps)  # first token at 7.0 s: 4 s after spot's
    pairs, inversions = priority_inversions([spot_first, acme_overtaken], plan)
    assert pairs == 1 and inversions == [(acme_overtaken, spot_first)]
    already_running = request("initech", "spot", 0.9, ttft=0.15, gaps=gaps)  # first token 0.15 s after acme came
    assert priority_inversions([already_running, acme_overtaken], plan) == (0, [])
    result = verdict([spot_first, acme_overtaken], plan, scenario("priority-ordering", plan, short=True))
    assert not result.checks[0].passed and "1 of 1 queued pairs out of order" in result.checks[0].detail


def test_priority_ordering_with_nothing_queued_together_says_what_kept_the_tiers_apart(plan):
    paused = request("initech", "spot", 1.0, status=429, error="engine tiny serving guaranteed or best-effort "
                     "traffic (within the last 10 s): spot traffic paused", shed="others-active")
    result = verdict([request("acme", "guaranteed", 1.0), paused], plan, scenario("priority-ordering", plan, short=True))
    assert result.checks[0].passed
    assert result.checks[0].detail == ("no guaranteed request was queued together with a lower-tier one (0 pairs to "
                                       "order): admission refused 1 lower-tier requests")
    assert result.tenants["initech"].shed_429 == 1 and result.tenants["initech"].quota_429 == 0


def test_engine_failure_needs_answers_from_the_fallback(plan):
    failure = scenario("engine-failure", plan, short=True)
    assert failure.stages[1].fault == Fault("stop-engine", "tiny") and failure.subject["fallback"] == "micro"
    records = steady_records()
    check = verdict(records, plan, failure).checks[0]
    assert not check.passed
    records.append(request("acme", "guaranteed", 50, served_by="micro"))
    check = verdict(records, plan, failure).checks[0]
    assert check.passed and "1 of" in check.detail


def test_streams_cut_by_the_stopped_engine_are_judged_by_the_fault_not_the_error_rates(plan):
    failure = scenario("engine-failure", plan, short=True)
    _, stopped_at = failure.fault_at("stop-engine")
    served = [*steady_records(), request("acme", "guaranteed", stopped_at + 20, served_by="micro")]
    cut = request("globex", "best-effort", stopped_at - 1, gaps=(0.02, 3.0),
                  error="an error event: payload not completed")
    result = verdict([*served, cut], plan, failure)
    assert result.passed, result
    assert result.tenants["globex"].errors == 0 and result.tenants["globex"].requests == 40
    assert "1 in flight as it stopped failed within 2.1 s (first: an error event" in result.checks[0].detail
    # One that fails well after the stop is the tenant's error; one that hangs on the dead engine fails the check.
    late = request("globex", "best-effort", stopped_at + 20, status=500, error="Internal Server Error")
    assert verdict([*served, cut, late], plan, failure).tenants["globex"].errors == 1
    hung = request("acme", "guaranteed", stopped_at - 1, gaps=(0.02, 40.0), error="read timed out")
    check = verdict([*served, hung], plan, failure).checks[0]
    assert not check.passed and "1 request(s) in flight as it stopped took more than 25 s to fail" in check.detail


def test_cache_isolation_expects_hits_exactly_where_salts_match(plan):
    probes = scenario("cache-isolation", plan, short=True)
    pairs = {(a, b) for a, b, model in probes.cache_probes if model == "tiny"}
    assert ("acme", "acme") in pairs and ("acme", "globex") in pairs and ("acme", "initech") in pairs

    def probe(first, second, cached):
        return request(second, "x", 1, probe=f"{first}/{second}/tiny/1:second", cached_tokens=cached)

    good = [probe("acme", "acme", 288), probe("acme", "globex", 0), probe("initech", "initech", 288)]
    assert verdict(good, plan, probes).checks[0].passed
    leaked = [*good, probe("acme", "initech", 64)]
    check = verdict(leaked, plan, probes).checks[0]
    assert not check.passed and "initech after acme on tiny: 64 cached tokens (different salt)" in check.detail
    blind = [probe("acme", "acme", None)]
    assert "report no cached tokens" in verdict(blind, plan, probes).checks[0].detail


def test_every_scenario_builds_for_the_local_stacks_and_short_ones_fit_two_minutes(plan):
    plan = dataclasses.replace(plan, gateway=dataclasses.replace(plan.gateway, replicas=2))  # one to kill
    # acme reserves all it may send on tiny in stacks/local.yaml: the tests' stack gives it an overload fallback.
    overflowing = {"noisy-neighbour-overload": plan_stack(ROOT / "tests" / "local" / "stack.yaml")}
    for name in SCENARIOS:
        stack = overflowing.get(name, plan)
        assert scenario(name, stack, short=True).seconds <= 120, name
        assert scenario(name, stack).seconds > scenario(name, stack, short=True).seconds


def test_scenarios_refuse_what_they_cannot_run(plan):
    with pytest.raises(ScenarioError, match="no scenario named 'noisy'"):
        scenario("noisy", plan)
    with pytest.raises(ScenarioError, match="--tenant nobody: stack local has no such tenant"):
        scenario("steady", plan, tenant="nobody")
    no_spot = dataclasses.replace(plan, tenants=tuple(t for t in plan.tenants if t.tier != "spot"))
    with pytest.raises(ScenarioError, match="needs a spot tenant"):
        scenario("noisy-neighbour", no_spot)
    with pytest.raises(ScenarioError, match="kills one of two gateway replicas; stack local runs 1"):
        scenario("gateway-killed", plan)


def test_traffic_classes_and_requests_follow_the_spec(plan):
    classes = {c.name: c for c in traffic_classes(plan)}
    assert set(classes) == {"acme-chat", "acme-adapter", "globex-adapter", "globex-chat", "initech-batch"}
    assert classes["globex-chat"].share == pytest.approx(0.4)
    import random

    initech = plan.tenant("initech")
    body = request_body(initech, initech.traffic[0], random.Random(1))
    assert body["stream"] is False and body["max_tokens"] == 128 and body["ignore_eos"] is True
    globex = plan.tenant("globex")
    rag = request_body(globex, globex.traffic[0], random.Random(1))
    other = request_body(globex, globex.traffic[0], random.Random(2))
    prompt, again = rag["messages"][0]["content"], other["messages"][0]["content"]
    assert prompt.split("\nQuestion: ")[0] == again.split("\nQuestion: ")[0]  # the shared document
    assert prompt != again and rag["stream"] is True


def test_each_run_draws_its_own_prompts_unless_the_scenario_repeats_them(plan):
    import random

    from tenantry.gate.run import prompt_seed

    steady = scenario("steady", plan, short=True)
    first, second = prompt_seed(steady), prompt_seed(steady)
    assert first and second and first != second
    assert prompt_seed(dataclasses.replace(steady, repeat_prompts=True)) == ""
    globex = plan.tenant("globex")

    def document(seed: str) -> str:
        body = request_body(globex, globex.traffic[0], random.Random(f"{seed}globex-chat:0"), run_seed=seed)
        return body["messages"][0]["content"].split("\nQuestion: ")[0]

    # Within a run a tenant's RAG document is one shared prefix; across runs it is new, so an engine's prefix
    # cache holds nothing of it from the run before.
    assert document(first) == document(first) and document(first) != document(second)
    assert document("") == document("")


def test_the_cache_state_each_latency_was_measured_in_is_reported(plan):
    steady = scenario("steady", plan, short=True)
    records = steady_records()
    for r in records:
        r.prompt_tokens, r.cached_tokens = (200, 150) if r.tenant == "acme" else (200, None)
    figures = verdict(records, plan, steady).tenants
    assert figures["acme"].cached_share == pytest.approx(0.75)
    assert figures["globex"].cached_share is None  # no engine said: not counted as cold
    assert verdict(records, plan, steady).stages["steady"]["acme"].cached_share == pytest.approx(0.75)


def test_records_round_trip(tmp_path):
    records = steady_records(2)
    write_records(tmp_path, records)
    assert read_records(tmp_path) == records
    assert (tmp_path / "requests.csv").read_text().startswith("tenant,tier,profile,target,stage,sent")


@pytest.mark.parametrize(("header", "seconds"), [("10", 10.0), ("1.5", 1.5), ("60", 60.0), ("61", 0.0), ("0", 0.0),
                                                  ("-3", 0.0), ("", 0.0), ("Wed, 21 Oct 2026 07:28:00 GMT", 0.0)])
def test_a_refused_gate_client_waits_the_retry_after_the_openai_sdk_would(header, seconds):
    assert retry_after_seconds(header) == seconds
