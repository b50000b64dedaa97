"""The scenario checks that judge latency: the ramp's first broken guaranteed SLO, and noisy-neighbour's victims'
time to first token in the flood as a ratio to alone, for runs that report absolute latency without judging it
(Scenario.latency_judged; docs/decisions.md: CI judges what a shared machine can judge)."""

from __future__ import annotations

from tenantry.gate.records import Record
from tenantry.gate.scenario_model import Scenario
from tenantry.gate.verdict import Check, ms, stage_figures
from tenantry.plan.model import Plan


def check_ramp(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """Guaranteed SLOs must hold up to the contract (the x1 step); past it, where they break is reported. The load
    must have risen, or the run says nothing about where an SLO breaks: the last step sent more requests than the
    first (it offers eight times as many). Where the run reports latency without judging it, an SLO breaks on
    errors and refusals only, and the guaranteed tenants' median time to first token at each step is reported as
    a ratio to the first step's."""
    stages = stage_figures(records, plan, scenario)
    first, last = scenario.stages[0].name, scenario.stages[-1].name
    sent = {name: sum(f.requests for f in tenants.values()) for name, tenants in stages.items()}
    if sent[last] <= sent[first]:
        return Check("ramp", False, f"the load did not rise: {sent[first]} requests sent at {first}, {sent[last]} at "
                     f"{last}")
    rose = f"requests sent per step {' / '.join(str(n) for n in sent.values())}"
    if not scenario.latency_judged:
        rose += "; latency reported, not judged: " + "; ".join(
            f"{t.name} TTFT p50 x{ratio:.2f} at {last} of {first}" for t in plan.tenants if t.tier == "guaranteed"
            if (ratio := _ratio(stages[last][t.name].ttft_p50, stages[first][t.name].ttft_p50)) is not None)
    broken = []
    for stage, tenants in stages.items():
        for figures in tenants.values():
            # A step in which the tenant sent nothing measured nothing: not a break (Locust's users of a tenant at a
            # low rate can sit out a 12 s step across a stage change; CI, 2026-12-06).
            if figures.tier == "guaranteed" and figures.passed is False and figures.requests:
                broken.append((float(stage.lstrip("x")), stage, figures))
    if not broken:
        return Check("ramp", True, f"no guaranteed SLO broke up to {last} the contract ({rose})")
    step, stage, figures = min(broken, key=lambda b: b[0])
    load = sum(s.loads[t].rate for s in scenario.stages if s.name == stage for t in s.loads)
    detail = (f"first guaranteed SLO broke at {stage} the contract (offered {load:.2f} req/s over all tenants): "
              f"{figures.tenant}: {'; '.join(figures.reasons)} ({rose})")
    return Check("ramp", step > 1.0, detail)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


FLOOD_TTFT_RATIO = 3.0
"""noisy-neighbour's flood-latency check: each guaranteed tenant's median time to first token while the aggressor
floods may be at most this many times its median alone, in the same run (docs/decisions.md: CI judges what a
shared machine can judge)."""


def check_flood_latency(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """The victims' latency as a ratio within the run: median TTFT in the flood stage against the alone stage, each
    at most FLOOD_TTFT_RATIO. A ratio of two medians of the same run, on the same machine, judges the isolation a
    shared CI machine can judge; the absolute SLO is the real run's (Scenario.latency_judged)."""
    stages = stage_figures(records, plan, scenario)
    alone, flood = scenario.stages[0].name, scenario.stages[-1].name
    aggressor = scenario.subject.get("aggressor")
    ratios, problems = [], []
    for tenant in (t for t in plan.tenants if t.tier == "guaranteed" and t.name != aggressor):
        before, during = stages[alone][tenant.name].ttft_p50, stages[flood][tenant.name].ttft_p50
        ratio = _ratio(during, before)
        if ratio is None:
            problems.append(f"{tenant.name} has no answered request in {alone if before is None else flood}")
            continue
        ratios.append(f"{tenant.name} x{ratio:.2f} ({ms(before)} ms alone, {ms(during)} ms in the flood)")
        if ratio > FLOOD_TTFT_RATIO:
            problems.append(f"{tenant.name}'s median TTFT rose x{ratio:.2f} in the flood (at most "
                            f"x{FLOOD_TTFT_RATIO:g})")
    if not ratios and not problems:
        problems.append("no guaranteed tenant to compare")
    detail = "; ".join([*problems, *ratios]) if problems else "median TTFT in the flood against alone: " + \
        ", ".join(ratios)
    return Check("flood-latency", not problems, detail)


CHECKS = {
    "ramp": check_ramp,
    "flood-latency": check_flood_latency,
}
