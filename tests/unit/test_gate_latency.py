"""The latency checks (tenantry/gate/latency_checks.py) and a run that reports latency without judging it, on
requests made up here."""

from __future__ import annotations

import dataclasses

from tenantry.gate.records import Record
from tenantry.gate.scenarios import scenario
from tenantry.gate.verdict import verdict
from tests.unit.test_gate_verdict import plan, request, steady_records  # noqa: F401 (plan is a fixture)


def _stage_starts(run) -> dict[str, float]:
    starts, elapsed = {}, 0.0
    for stage in run.stages:
        starts[stage.name] = elapsed
        elapsed += stage.seconds
    return starts


def _ramping(run) -> list[Record]:
    """One more acme request at each step than at the one before, each well within its SLO."""
    starts = _stage_starts(run)
    return [request("acme", "guaranteed", starts[s.name] + 1 + i) for n, s in enumerate(run.stages)
            for i in range(n + 1)]


def test_ramp_fails_only_when_a_guaranteed_slo_breaks_within_the_contract(plan):
    ramp = scenario("ramp", plan, short=True)
    starts, fine = _stage_starts(ramp), _ramping(ramp)
    assert verdict(fine, plan, ramp).checks[0].detail.startswith("no guaranteed SLO broke up to x2 the contract "
                                                                 "(requests sent per step 1 / 2 / 3 / 4 / 5)")
    breaks_late = fine + [request("acme", "guaranteed", starts["x2"] + 2, ttft=9.0)]
    check = verdict(breaks_late, plan, ramp).checks[0]
    assert check.passed and "first guaranteed SLO broke at x2" in check.detail
    breaks_early = fine + [request("acme", "guaranteed", starts["x0.5"] + 2, ttft=9.0)]
    check = verdict(breaks_early, plan, ramp).checks[0]
    assert not check.passed and "first guaranteed SLO broke at x0.5" in check.detail


def test_a_ramp_step_in_which_the_guaranteed_tenant_sent_nothing_is_not_a_break(plan):
    ramp = scenario("ramp", plan, short=True)
    starts = _stage_starts(ramp)
    gap = [r for r in _ramping(ramp) if not starts["x0.5"] <= r.sent < starts["x1"]]
    check = verdict(gap, plan, ramp).checks[0]
    assert check.passed and check.detail.startswith("no guaranteed SLO broke up to x2"), check


def test_a_ramp_whose_load_did_not_rise_fails_whatever_its_latency(plan):
    """Locust's users never spawned past the first step, say: the run cannot tell where an SLO breaks."""
    ramp = scenario("ramp", plan, short=True)
    flat = [request("acme", "guaranteed", start + 1) for start in _stage_starts(ramp).values()]
    check = verdict(flat, plan, ramp).checks[0]
    assert not check.passed and check.detail == "the load did not rise: 1 requests sent at x0.25, 1 at x2"


def test_reported_latency_is_shown_but_only_errors_and_refusals_judge_a_tenant(plan):
    steady = dataclasses.replace(scenario("steady", plan, short=True), latency_judged=False)
    slow = steady_records() + [request("acme", "guaranteed", 30 + i, ttft=4.0) for i in range(10)]
    result = verdict(slow, plan, steady)
    assert result.passed and result.tenants["acme"].passed is True
    assert result.tenants["acme"].notes == ["p95 time to first token 4000 ms > 2000 ms"]
    failing = slow + [request("acme", "guaranteed", 40 + i, status=500, error="boom") for i in range(3)]
    acme = verdict(failing, plan, steady).tenants["acme"]
    assert acme.passed is False and acme.reasons[0].startswith("error rate")


def test_a_reported_latency_ramp_breaks_on_errors_and_reports_the_ttft_ratio(plan):
    ramp = dataclasses.replace(scenario("ramp", plan, short=True), latency_judged=False)
    starts = _stage_starts(ramp)
    fine = _ramping(ramp) + [request("acme", "guaranteed", starts["x2"] + 9, ttft=9.0) for _ in range(5)]
    check = verdict(fine, plan, ramp).checks[0]
    assert check.passed and "latency reported, not judged: acme TTFT p50 x" in check.detail, check
    failing = fine + [request("acme", "guaranteed", starts["x0.5"] + 2, status=500, error="boom")]
    check = verdict(failing, plan, ramp).checks[0]
    assert not check.passed and "first guaranteed SLO broke at x0.5" in check.detail and "error rate" in check.detail


def test_noisy_neighbour_judges_the_victims_latency_as_a_ratio_within_the_run_where_latency_is_reported(plan):
    noisy = scenario("noisy-neighbour", plan, short=True)
    alone_seconds = noisy.stages[0].seconds

    def run(flood_ttft: float) -> list[Record]:
        return ([request("acme", "guaranteed", i, ttft=0.2) for i in range(10)]
                + [request("acme", "guaranteed", alone_seconds + i, ttft=flood_ttft) for i in range(10)])

    assert [c.name for c in verdict(run(0.2), plan, noisy).checks] == []  # judged absolutely: no ratio check
    reported = dataclasses.replace(noisy, latency_judged=False)
    check = verdict(run(0.5), plan, reported).checks[0]
    assert check.name == "flood-latency" and check.passed
    assert check.detail == "median TTFT in the flood against alone: acme x2.50 (200 ms alone, 500 ms in the flood)"
    check = verdict(run(0.7), plan, reported).checks[0]
    assert not check.passed and check.detail.startswith("acme's median TTFT rose x3.50 in the flood (at most x3)")
    alone_only = [r for r in run(0.2) if r.sent < alone_seconds]
    check = verdict(alone_only, plan, reported).checks[0]
    assert not check.passed and check.detail.startswith("acme has no answered request in flood")
