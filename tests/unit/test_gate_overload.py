"""noisy-neighbour-overload: a guaranteed tenant whose engine the others fill is served by its overload
fallback (tenantry/gate/scenarios.py builds it, tenantry/gate/verdict.py's check_overload_fallback judges it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tenantry.gate.profiles import answer_tokens
from tenantry.gate.records import Record
from tenantry.gate.scenario_model import Load, Scenario, ScenarioError
from tenantry.gate.scenarios import scenario
from tenantry.gate.verdict import verdict
from tenantry.plan.model import Plan, Reservation
from tenantry.stacks import plan_stack
from tests.unit.test_gate_verdict import request

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local():
    return plan_stack(ROOT / "stacks" / "local.yaml")


def test_noisy_neighbour_overload_crowds_the_victims_engine_and_refuses_stacks_that_cannot_reroute(local):
    tests_stack = plan_stack(ROOT / "tests" / "local" / "stack.yaml")
    run = scenario("noisy-neighbour-overload", tests_stack, short=True)
    assert run.subject == {"victim": "acme", "engine": "tiny"}  # acme reserves 3 of its 4 there
    alone, crowded = run.stages
    # All of acme's requests to tiny, at its full concurrency and within its contract (TPM at its typical
    # request: 40000 / (200 + 48) / 60 = 2.69 requests/s): half of it alone, 0.9 of it while crowded.
    contract = 40000 / 248 / 60
    assert alone.loads == {"acme": Load(4, pytest.approx(0.5 * contract), engines=("tiny",))}
    assert crowded.loads["acme"] == Load(4, pytest.approx(0.9 * contract), engines=("tiny",))
    assert (alone.seconds, crowded.seconds) == (15, 60)
    acme = tests_stack.tenant("acme")
    assert alone.loads["acme"].weights(acme.traffic) == [0.4, 0.35, 0.0]  # tiny, acme-support on tiny, micro
    assert crowded.loads["acme"].of_class(acme.traffic, acme.traffic) == (4, pytest.approx(4 / (0.9 * contract)))
    assert Load(4, 2.0).of_class(acme.traffic[2:], acme.traffic) == (1, 2.0)  # micro's quarter, unrestricted
    assert Load(4, 2.0, engines=("tiny",)).of_class(acme.traffic[2:], acme.traffic) == (0, 0.0)
    # Only tiny's tenants join, only to tiny: best-effort back to back at its concurrency, spot flooding at 5x,
    # both asking 8x their typical answers so that they hold tiny's five shared slots the whole stage.
    assert crowded.loads["globex"] == Load(3, 0, engines=("tiny",))
    assert crowded.loads["initech"].users == 20 and crowded.loads["initech"].engines == ("tiny",)
    assert set(crowded.loads) == {"acme", "globex", "initech"}
    assert run.output_scales == {"globex": 8.0, "initech": 8.0} and run.output_scale_of("acme") == 1.0
    assert answer_tokens(tests_stack.tenant("globex"), run.output_scale_of("globex")) == 384
    with pytest.raises(ScenarioError, match="stack local has none"):
        scenario("noisy-neighbour-overload", local)  # acme reserves all 4 of its concurrency on tiny
    with pytest.raises(ScenarioError, match="globex is best-effort"):
        scenario("noisy-neighbour-overload", tests_stack, tenant="globex")
    whole = dataclasses.replace(tests_stack.tenant("acme"), traffic=tuple(
        r for r in tests_stack.tenant("acme").traffic if r.engine == "tiny"))
    no_room = dataclasses.replace(tests_stack, tenants=tuple(whole if t.name == "acme" else t
                                                             for t in tests_stack.tenants))
    no_room = dataclasses.replace(no_room, engines=tuple(
        dataclasses.replace(e, slots=dataclasses.replace(e.slots, reserved=(Reservation(tenant="acme", slots=4),)))
        if e.name == "tiny" else e for e in no_room.engines))
    with pytest.raises(ScenarioError, match="acme reserves all 4 of its concurrency on every engine it sends to"):
        scenario("noisy-neighbour-overload", no_room, tenant="acme")


def _overload_run(*victims: Record) -> tuple[list[Record], Plan, Scenario]:
    tests_stack = plan_stack(ROOT / "tests" / "local" / "stack.yaml")
    run = scenario("noisy-neighbour-overload", tests_stack, short=True)
    crowd = [request("globex", "best-effort", 20 + i, status=429, error="all 5 unreserved slots are busy",
                     shed="shared-slots") for i in range(3)]
    return [request("acme", "guaranteed", i) for i in range(40)] + crowd + list(victims), tests_stack, run


def test_overload_fallback_passes_when_the_fallback_served_and_nothing_was_refused():
    rerouted = request("acme", "guaranteed", 30, rerouted="tiny -> micro (shared-slots)", served_by="micro")
    records, stack, run = _overload_run(rerouted, dataclasses.replace(rerouted, sent=31))
    result = verdict(records, stack, run)
    check = result.checks[0]
    assert result.passed and check.name == "overload-fallback" and check.passed, check
    assert ("acme sent 42 requests, 27 to tiny while the others filled it: 2 rerouted (2 for shared-slots) and "
            "served by micro, 7% of those; the others were refused for capacity 3 time(s) (3 shared-slots)"
            ) in check.detail
    # Beyond its reservation on micro (a quarter of 4, one slot) capacity may refuse it there, as the Plan says.
    on_micro = request("acme", "guaranteed", 32, status=429, target="micro", shed="shared-slots",
                       error="engine micro: all 3 unreserved slots are busy; guaranteed traffic waits")
    check = verdict([*records, on_micro], stack, run).checks[0]
    assert check.passed and "1 of acme's requests to its other engines were refused for capacity" in check.detail
    # Its own limits are its contract's business, reported: rerouting is for capacity.
    limited = request("acme", "guaranteed", 10, status=429, error="Rate limit exceeded for team: acme. Limit type: tokens")
    check = verdict([*records, limited], stack, run).checks[0]
    assert check.passed and ("1 of acme's requests were refused by its own limits, which rerouting does not lift "
                             "(first: Rate limit") in check.detail


def test_overload_fallback_fails_when_the_victim_sent_nothing_while_its_engine_was_crowded():
    """As when acme, back to back, spent its TPM in the first stage and was told to retry after 60 s."""
    tests_stack = plan_stack(ROOT / "tests" / "local" / "stack.yaml")
    run = scenario("noisy-neighbour-overload", tests_stack, short=True)
    records = [request("acme", "guaranteed", i / 4) for i in range(40)]  # all within the first 10 s
    check = verdict(records, tests_stack, run).checks[0]
    assert not check.passed and "it sent no request to tiny while the others filled it" in check.detail, check


@pytest.mark.parametrize(("extra", "says"), [
    ((), "none of its requests was rerouted: tiny never ran out of room for it"),
    ((request("acme", "guaranteed", 30, status=429, error="all 5 unreserved slots are busy", shed="shared-slots"),),
     "1 of its request(s) refused for capacity (first: all 5 unreserved"),
    ((request("acme", "guaranteed", 30, status=500, error="Internal Server Error"),),
     "1 of its request(s) failed (first: HTTP 500 Internal Server Error)"),
    ((request("acme", "guaranteed", 30, rerouted="tiny -> tiny (shared-slots)", served_by="tiny"),),
     "1 rerouted answer(s) served by a model outside its overload fallback (first: tiny -> tiny"),
])
def test_overload_fallback_fails_on_a_refusal_a_failure_or_no_reroute(extra, says):
    rerouted = request("acme", "guaranteed", 31, rerouted="tiny -> micro (shared-slots)", served_by="micro")
    records, stack, run = _overload_run(*extra, *(() if not extra else (rerouted,)))
    check = verdict(records, stack, run).checks[0]
    assert not check.passed and says in check.detail, check
