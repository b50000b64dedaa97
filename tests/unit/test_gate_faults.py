"""The fault scenarios' checks (tenantry/gate/fault_checks.py) on records made here, each failure
they exist to catch made once; against the real stack: tests/local/test_faults_live.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tenantry.gate.fault_checks import (check_budget_exhausted, check_database_outage, check_fallback,
                                        check_gateway_killed, check_redis_outage)
from tenantry.gate.records import Record
from tenantry.gate.scenarios import BUDGET_OUTPUT_SCALE, scenario
from tenantry.gateway.tenant_policy_ledger import LEASE_SECONDS
from tenantry.stacks import plan_stack

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan():
    local = plan_stack(ROOT / "stacks" / "local.yaml")
    return dataclasses.replace(local, gateway=dataclasses.replace(local.gateway, replicas=2))


def sent(at: float, gateway: int = 0, status: int = 200, e2e: float = 1.0, error: str = "", tenant: str = "acme",
         shed: str = "") -> Record:
    return Record(tenant, "guaranteed", "chat", "tiny", "s", at, True, status, e2e, error=error, gateway=gateway,
                  shed=shed)


KILLED_AT = 10.0  # the short version's first stage


def healthy_run() -> list[Record]:
    return [sent(t) for t in range(0, 70, 2)] + [
        sent(KILLED_AT - 0.5, gateway=1, e2e=2.0, error="ChunkedEncodingError: connection broken"),  # cut mid-stream
        sent(KILLED_AT + 1, gateway=1, status=0, e2e=0.01, error="ConnectionError: refused"),  # its client moved on
        sent(KILLED_AT - 5, gateway=1)]


AT_LIMIT = "tenant acme has 4 requests in flight, its limit is 4"


def test_a_clean_kill_passes_and_says_what_happened(plan):
    held = sent(KILLED_AT + 10, status=429, error=AT_LIMIT)  # within the lease: the dead replica's slot
    check = check_gateway_killed([*healthy_run(), held], plan, scenario("gateway-killed", plan, short=True))
    assert check.passed, check
    assert ("1 request(s) in flight on replica 1 were cut, all within 1.5 s of the kill; 1 sent to it afterwards "
            "were refused a connection") in check.detail
    assert "the dead replica's slots refused 1 request(s), the last 10 s after the kill" in check.detail


def test_a_refusal_at_the_limit_the_tenant_really_holds_is_not_a_held_slot(plan):
    limit = plan.tenant("acme").max_concurrency
    busy = [sent(KILLED_AT + 50, e2e=5.0) for _ in range(limit - 1)] + [sent(KILLED_AT + 49, e2e=1.5)]  # ended 0.5 s ago
    refused = sent(KILLED_AT + 51, status=429, error=AT_LIMIT)
    assert check_gateway_killed([*healthy_run(), *busy, refused], plan,
                                scenario("gateway-killed", plan, short=True)).passed


@pytest.mark.parametrize(("extra", "says"), [
    (sent(30, gateway=0, status=500, error="boom"), "1 request(s) to the surviving gateway(s) failed"),
    (sent(30, gateway=0, status=200, error="the stream ended without [DONE]"), "to the surviving gateway(s) failed"),
    (sent(KILLED_AT - 1, gateway=1, status=0, e2e=40.0, error="ReadTimeout"), "took more than 10 s to fail"),
    (sent(KILLED_AT + LEASE_SECONDS + 15, status=429, error=AT_LIMIT), "refused for concurrency their tenant was not using"),
])
def test_each_loss_fails_the_kill(plan, extra, says):
    check = check_gateway_killed([*healthy_run(), extra], plan, scenario("gateway-killed", plan, short=True))
    assert not check.passed and says in check.detail


def test_a_shed_or_a_rate_limit_after_the_lease_is_not_a_held_slot(plan):
    late = KILLED_AT + LEASE_SECONDS + 15
    for refusal in (sent(late, status=429, error="busy", shed="kv"), sent(late, status=429, error="Rate limit exceeded")):
        assert check_gateway_killed([*healthy_run(), refusal], plan, scenario("gateway-killed", plan, short=True)).passed


STOPPED_AT, BACK_AT = 10.0, 40.0


def outage_run() -> list[Record]:
    return [sent(t) for t in range(0, 90, 2)] + [sent(25, status=500, error="database unavailable")]


def test_an_outage_served_from_the_key_cache_passes(plan):
    check = check_database_outage(outage_run(), plan, scenario("database-outage", plan, short=True))
    assert check.passed and "during the outage 15 of 16 request(s) were answered, 1 failed" in check.detail


@pytest.mark.parametrize(("extra", "says"), [
    (sent(30, status=401, error="Authentication Error"), "refused as unauthenticated"),
    (sent(30, status=0, error="ReadTimeout"), "got no answer at all"),
    (sent(BACK_AT + 20, status=500, error="still broken"), "failed more than 15 s after PostgreSQL was back"),
])
def test_each_outage_loss_fails(plan, extra, says):
    check = check_database_outage([*outage_run(), extra], plan, scenario("database-outage", plan, short=True))
    assert not check.passed and says in check.detail


def test_recovery_counts_from_when_the_restore_command_returned_as_the_run_recorded_it(plan):
    """A request failed 20 s after the scheduled restart is within the recovery if the command returned 8 s late."""
    run = scenario("database-outage", plan, short=True)
    late = dataclasses.replace(run, fault_times={"stop-postgres": (10, 11), "start-postgres": (43, BACK_AT + 8)})
    failed = sent(BACK_AT + 20, status=500, error="database unavailable")
    assert check_database_outage([*outage_run(), failed], plan, late).passed
    assert not check_database_outage([*outage_run(), failed], plan, run).passed

REDIS_AWAY = "admission state unavailable: best-effort traffic paused"


def lower(at: float, status: int = 429, shed: str = "redis", error: str = REDIS_AWAY) -> Record:
    return Record("globex", "best-effort", "chat", "tiny", "s", at, True, status, 0.3, error=error, shed=shed)


def redis_outage_run() -> list[Record]:
    guaranteed = [sent(t, e2e=1.5) for t in range(0, 70, 1)]  # one or two in flight at a time
    best_effort = [lower(t, status=200, shed="", error="") for t in (2, 6, 55, 65)] + [lower(t) for t in (15, 25, 35)]
    return guaranteed + best_effort


def together(at: float, n: int) -> list[Record]:
    return [sent(at + i * 0.01, e2e=3.0) for i in range(n)]


def test_a_redis_outage_within_the_fail_safe_passes(plan):
    check = check_redis_outage([*redis_outage_run(), *together(20, 6)], plan,
                               scenario("redis-outage", plan, short=True))
    assert check.passed, check
    assert "Redis away from +5.0 s to +25.0 s of the stop: 3 lower-tier request(s) refused" in check.detail
    assert "acme peaked at 7 in flight while Redis was away (bound 8: 2 replicas x 4), 1 after" in check.detail


def test_each_replica_is_judged_from_its_own_first_refusal_for_redis(plan):
    """Replica 1 had not yet called Redis when replica 0 first refused: what it served until its own first
    refusal was admitted while Redis still answered it; after that, nothing may be."""
    on_one = [dataclasses.replace(lower(t), gateway=1) for t in (18, 30)]
    early = dataclasses.replace(lower(16, status=200, shed="", error=""), gateway=1)
    late = dataclasses.replace(lower(20, status=200, shed="", error=""), gateway=1)
    run = scenario("redis-outage", plan, short=True)
    assert check_redis_outage([*redis_outage_run(), *on_one, early], plan, run).passed
    assert not check_redis_outage([*redis_outage_run(), *on_one, late], plan, run).passed


def test_a_request_sent_while_the_first_refusal_still_waited_on_redis_may_have_been_served(plan):
    """The replica refused its first request for Redis 0.3 s after it was sent (15 s): one sent 0.2 s after it
    may have reached Redis before it went; one sent once that refusal was answered may not."""
    run = scenario("redis-outage", plan, short=True)
    before_the_answer = lower(15.2, status=200, shed="", error="")
    after_the_answer = lower(15.4, status=200, shed="", error="")
    assert check_redis_outage([*redis_outage_run(), before_the_answer], plan, run).passed
    assert not check_redis_outage([*redis_outage_run(), after_the_answer], plan, run).passed


def test_a_request_admission_held_until_redis_was_started_again_is_reported_not_judged(plan):
    """Admission may wait on Redis: a first token after the command to start it again (recorded 1.5 s late) may
    follow an admission by Redis back; one before it was admitted without Redis, even after the schedule's restart."""
    run = dataclasses.replace(scenario("redis-outage", plan, short=True),
                              fault_times={"stop-redis": (STOPPED_AT, STOPPED_AT + 1), "start-redis": (41.5, 42.5)})
    served = [dataclasses.replace(lower(34.8, 200, "", ""), ttft=ttft) for ttft in (7.0, 6.0)]
    check = check_redis_outage([*redis_outage_run(), served[0]], plan, run)
    assert check.passed and "1 lower-tier request(s) sent while Redis was away had their first token only after" \
        in check.detail, check
    check = check_redis_outage([*redis_outage_run(), served[1]], plan, run)
    assert not check.passed and "its first token at +30.8 s; the command to start Redis again at +31.5 s" \
        in check.detail, check


@pytest.mark.parametrize(("extra", "says"), [
    ([sent(20, status=429, error="busy", shed="redis")], "1 guaranteed request(s) refused for capacity or unanswered"),
    ([sent(20, status=0, error="ReadTimeout")], "1 guaranteed request(s) refused for capacity or unanswered"),
    ([lower(20, status=200, shed="", error="")], "1 best-effort request(s) served while Redis was away"),
    ([lower(BACK_AT + 20)], "refused for Redis or failed more than 15 s after it was back"),
])
def test_each_fail_safe_breach_fails_the_redis_outage(plan, extra, says):
    check = check_redis_outage([*redis_outage_run(), *extra], plan, scenario("redis-outage", plan, short=True))
    assert not check.passed and says in check.detail, check


def test_a_guaranteed_request_beyond_its_reservation_refused_while_redis_answers_is_reported_not_judged(plan):
    """A clean clone of 4db776b failed on one: acme's request to micro 12 s after Redis was back, beyond
    the one slot acme reserves there ("all 3 unreserved slots are busy"). While Redis is away it would be a breach."""
    busy = "engine micro: all 3 unreserved slots are busy; guaranteed traffic waits"
    after = sent(BACK_AT + 12, status=429, error=busy, shed="shared-slots")
    check = check_redis_outage([*redis_outage_run(), after], plan, scenario("redis-outage", plan, short=True))
    assert check.passed and "1 guaranteed request(s) beyond their tenant's reservation on an engine refused" in \
        check.detail, check
    during = sent(20, status=429, error=busy, shed="shared-slots")
    check = check_redis_outage([*redis_outage_run(), during], plan, scenario("redis-outage", plan, short=True))
    assert not check.passed and "1 guaranteed request(s) refused for capacity or unanswered" in check.detail


def test_an_outage_nobody_was_refused_for_was_not_seen(plan):
    unseen = [r for r in redis_outage_run() if r.shed != "redis"]
    check = check_redis_outage(unseen, plan, scenario("redis-outage", plan, short=True))
    assert not check.passed and "the outage was not seen" in check.detail


def test_an_engine_error_of_a_guaranteed_request_is_reported_not_judged(plan):
    engine_error = sent(20, status=500, error="Hosted_vllmException - Can not write request body")
    check = check_redis_outage([*redis_outage_run(), engine_error], plan, scenario("redis-outage", plan, short=True))
    assert check.passed and "1 guaranteed request(s) failed on their way to the engine" in check.detail


def test_a_scenario_runs_with_the_stage_lengths_the_gate_was_given(plan):
    from tenantry.gate.scenario_model import with_stage_seconds

    built = scenario("redis-outage", plan, short=True)
    assert with_stage_seconds(built, None) is built
    stretched = with_stage_seconds(built, [10, 30, 600])
    assert [s.seconds for s in stretched.stages] == [10, 30, 600] and stretched.seconds == 640
    assert stretched.stages[1].fault == built.stages[1].fault
    with pytest.raises(ValueError, match="has 3 stages, not 2"):
        with_stage_seconds(built, [10, 30])


def streamed(at: float, e2e: float, target: str = "tiny", served_by: str = "tiny", **outcome) -> Record:
    """A stream of acme's; a whole one unless `outcome` says how it ended."""
    ending = {"finish_reason": "length", "stream_end": "[DONE]", **outcome}
    return Record("acme", "guaranteed", "chat", target, "failed", at, True, ending.pop("status", 200), e2e,
                  served_by=served_by, **ending)


def test_an_engine_killed_mid_stream_must_end_its_streams_with_an_error_event_and_never_as_a_success(plan):
    killed = scenario("engine-killed", plan, short=True)
    assert killed.stream_all and killed.output_scale > 1 and killed.stages[1].fault.mid_stream
    # The kill was asked for 2 s into its stage, waiting for a stream, and landed 3 s after that.
    at = killed.stages[0].seconds + 2
    killed = dataclasses.replace(killed, fault_times={"kill-engine": (at, at + 3)})
    fallback = streamed(at + 10, 5, served_by="micro")
    clean = streamed(at - 4, 6.5, target="acme-support", stream_end="error event", finish_reason="",
                     error="{'message': 'APIConnectionError: Response payload is not completed'}")
    check = verdict_check(killed, [fallback, clean, streamed(at - 9, 4)])
    assert check.passed and "1 in flight as it was killed failed within 2.5 s" in check.detail, check
    # A cut sent after the command was asked for but before it landed is the fault's too.
    assert verdict_check(killed, [fallback, dataclasses.replace(clean, sent=at + 2.5, e2e=1)]).passed
    broken = dataclasses.replace(clean, stream_end="cut", error="ChunkedEncodingError: connection broken")
    check = verdict_check(killed, [fallback, broken])
    assert not check.passed, check
    assert "1 request(s) in flight as it was killed broke off without a status or an error event" in check.detail
    unanswered = dataclasses.replace(clean, status=0, stream_end="", error="RemoteDisconnected")
    assert not verdict_check(killed, [fallback, unanswered]).passed
    truncated = streamed(at - 4, 6.5, finish_reason="abort", output_tokens=12, max_tokens=1152)
    check = verdict_check(killed, [fallback, clean, truncated])
    assert not check.passed, check
    assert ("1 answer(s) in flight as it was killed ended as a success cut short, without a finish reason of stop "
            "or length or the tokens asked for (first: abort, 12 of 1152 tokens)") in check.detail
    # LiteLLM closes a stream its backend left unfinished with a "stop" of its own: the tokens tell.
    assert not verdict_check(killed, [fallback, clean, dataclasses.replace(truncated, finish_reason="stop")]).passed
    whole = dataclasses.replace(truncated, finish_reason="length", output_tokens=1152)
    assert verdict_check(killed, [fallback, clean, whole]).passed
    check = verdict_check(killed, [fallback, streamed(at - 9, 4)])
    assert not check.passed and "no stream under way was cut" in check.detail, check


def verdict_check(run, records):
    return check_fallback(records, plan_stack(ROOT / "stacks" / "local.yaml"), run)


BUDGET = "Budget has been exceeded! Team=c1cd Current cost: 0.00028, Max budget: 0.00024"
CAPPED_AT, RESTORED_AT = 15.0, 60.0  # the short version's stages: 15 s before, 45 s capped


def spent(at: float, status: int = 200, e2e: float = 1.0, error: str = "") -> Record:
    return dataclasses.replace(sent(at, status=status, e2e=e2e, error=error, tenant="globex"), tier="best-effort")


def budget_run() -> list[Record]:
    return ([spent(t) for t in range(0, 24, 2)]  # served, the last ones from the allowance
            + [spent(23.5, e2e=3.0)]  # in flight when the budget ran out: answered
            + [spent(t, status=422, e2e=0.05, error=BUDGET) for t in range(24, 60, 2)]
            + [spent(t) for t in range(61, 80, 2)] + [sent(t) for t in range(0, 80, 3)])


def _budget_check(records, plan):
    return check_budget_exhausted(records, plan, scenario("budget-exhausted", plan, short=True))


def test_the_budget_scenario_caps_the_first_best_effort_tenant_for_its_middle_stage_and_lengthens_its_answers(plan):
    run = scenario("budget-exhausted", plan, short=True)
    before, capped, restored = run.stages
    assert capped.fault.kind == "exhaust-budget" and capped.fault.subject == "globex"
    assert capped.fault.seconds == capped.seconds and capped.fault.restore == "restore-budget"
    assert before.fault is None and restored.fault is None and restored.seconds > 0  # time to be served again
    assert run.output_scale_of("globex") == BUDGET_OUTPUT_SCALE and run.output_scale_of("acme") == 1.0
    assert scenario("budget-exhausted", plan, short=True, tenant="acme").subject == {"spender": "acme"}


def test_a_spent_budget_refused_from_then_on_and_restored_passes(plan):
    check = _budget_check(budget_run(), plan)
    assert check.passed, check
    assert ("globex was refused 18 time(s) for its budget (gateway-0 from 9.0 s after the cap; HTTP 422: Budget"
            in check.detail)
    assert "1 of the 1 request(s) in flight then were answered" in check.detail
    assert "10 served after the restore" in check.detail


def test_a_request_sent_while_the_restore_command_ran_may_be_served(plan):
    run = scenario("budget-exhausted", plan, short=True)
    run = dataclasses.replace(run, fault_times={"exhaust-budget": (CAPPED_AT, CAPPED_AT + 0.5),
                                                "restore-budget": (RESTORED_AT, RESTORED_AT + 1.0)})
    records = budget_run() + [spent(RESTORED_AT + 0.5)]
    assert check_budget_exhausted(records, plan, run).passed
    assert not check_budget_exhausted(records + [spent(RESTORED_AT - 0.5)], plan, run).passed


def test_each_replica_is_judged_from_its_own_first_refusal(plan):
    """Each replica judges the team by its own cached spend: the other may serve a request sent just after
    the first refusal, as long as it refuses the spender from its own first refusal on."""
    on_the_other = [dataclasses.replace(spent(24.1), gateway=1),
                    *(dataclasses.replace(spent(t, status=422, e2e=0.05, error=BUDGET), gateway=1) for t in (25, 27))]
    check = _budget_check(budget_run() + on_the_other, plan)
    assert check.passed, check
    assert "(gateway-0 from 9.0 s, gateway-1 from 10.0 s after the cap;" in check.detail
    served_again = dataclasses.replace(spent(29), gateway=1)
    check = _budget_check(budget_run() + on_the_other + [served_again], plan)
    assert not check.passed and "(first 4.0 s after gateway-1's first refusal)" in check.detail, check
    # A replica that never refused is judged from the first refusal anywhere: the cap must reach it too.
    never = [dataclasses.replace(spent(t), gateway=1) for t in (24.1, 30)]
    check = _budget_check(budget_run() + never, plan)
    assert not check.passed and "2 request(s) sent after its budget ran out" in check.detail, check


@pytest.mark.parametrize(("change", "says"), [
    (lambda run: [r for r in run if r.status != 422], "globex's budget never ran out"),
    (lambda run: run + [spent(40)],
     "1 request(s) sent after its budget ran out on their replica were served (first 16.0 s after gateway-0's"),
    (lambda run: run + [spent(30, status=500, error="Internal Server Error")], "failed otherwise (first: HTTP 500"),
    (lambda run: run + [spent(30, status=0, error="ReadTimeout")], "failed otherwise (first: HTTP 0 ReadTimeout"),
    (lambda run: [r for r in run if r.sent < RESTORED_AT], "after the restore, 0 served"),
    (lambda run: run + [spent(70, status=400, error=BUDGET)], "after the restore, 10 served and 1 refused"),
    (lambda run: run + [spent(5, status=400, error=BUDGET)], "1 request(s) refused for its budget before the cap"),
    # Records are in the order they ended: a refusal sent first but ended last is still the first.
    (lambda run: run + [spent(23.0, status=422, e2e=30.0, error=BUDGET), spent(23.2, e2e=0.5)],
     "2 request(s) sent after its budget ran out on their replica were served (first 0.2 s after"),
])
def test_each_budget_loss_fails(plan, change, says):
    check = _budget_check(change(budget_run()), plan)
    assert not check.passed and says in check.detail, check


def test_a_killed_engine_is_down_until_it_answers_again_and_only_that_window_needs_the_fallback(plan):
    """Its supervisor starts a killed engine again (CI: 20 s for tiny): requests sent after it answers again are
    its own; those sent before must be served by the fallback, and a window no request fell in proves nothing
    about the fallback, which engine-failure shows, but loses nothing either."""
    killed = scenario("engine-killed", plan, short=True)
    at = killed.stages[0].seconds + 2
    killed = dataclasses.replace(killed, fault_times={"kill-engine": (at, at + 3)})
    cut = streamed(at - 4, 6.5, stream_end="error event", finish_reason="", error="{'message': 'APIConnectionError'}")
    again = streamed(at + 25, 5)  # answered by tiny itself: it is back
    check = verdict_check(killed, [cut, again])
    assert check.passed and "no request reached it before it answered again, 25.0 s after it was killed" in check.detail
    check = verdict_check(killed, [cut, streamed(at + 10, 5, served_by="micro"), again])
    assert check.passed and "1 of its 1 requests while it was down were answered by micro" in check.detail, check
    lost = streamed(at + 10, 0.1, status=500, stream_end="", finish_reason="", error="Internal Server Error")
    check = verdict_check(killed, [cut, lost, again])
    assert not check.passed and "none of its 1 requests while it was down were answered by micro" in check.detail
    # A stopped engine stays down: an answer of its own (sent before the stop landed) does not end the window.
    failed = scenario("engine-failure", plan, short=True)
    stop = failed.stages[0].seconds
    early = streamed(stop + 0.5, 1)
    assert not verdict_check(failed, [early, dataclasses.replace(lost, sent=stop + 20)]).passed


def test_the_mid_stream_kill_scenario_keeps_each_tenant_at_half_its_contract_in_tokens(plan):
    """acme's answers are 24 times as long in engine-killed (1,152 tokens), so it sends fewer requests and its
    tokens stay at half its TPM: 248 a request at its typical size, 1,352 there."""
    killed = scenario("engine-killed", plan, short=True).stages[1].loads["acme"]
    failed = scenario("engine-failure", plan, short=True).stages[1].loads["acme"]
    assert killed.users == failed.users and killed.rate == pytest.approx(failed.rate * 248 / 1352)


def test_the_mid_stream_kill_sends_the_longest_answer_asked_of_the_engine_itself(plan):
    """At acme's rate of 1,352-token requests (4.4 a minute at half its TPM of 12,000) none started in the 20 s
    one CI run's kill waited: the fault sends one itself, as the tenant asked the longest answers there."""
    from tenantry.gate.profiles import longest_answer
    from tenantry.gate.verdict import served_by

    killed = scenario("engine-killed", plan, short=True)
    tenant, entry, tokens = longest_answer(plan, served_by(plan, "tiny"), killed.output_scale_of)
    # acme's 48 typical tokens times 24; globex's tier caps its answers at 256, initech's at 128.
    assert (tenant.name, entry.target, tokens) == ("acme", "tiny", 1152)
    assert longest_answer(plan, {"micro"}, killed.output_scale_of)[0].name == "globex"  # acme does not send there
    assert longest_answer(plan, {"nowhere"}, killed.output_scale_of) is None


def test_the_gates_own_stream_asks_what_the_engines_context_leaves_within_the_tenants_cap(plan):
    """tiny's context is 2,048 tokens and acme's typical prompt 200: 2,048 - 2 x 200 = 1,648 (acme has no cap);
    globex's tier caps its answers at 256, which micro's context would leave room for many times over."""
    import random

    from tenantry.gate.profiles import longest_stream_body

    acme, globex = plan.tenant("acme"), plan.tenant("globex")
    to_tiny = next(r for r in acme.traffic if r.target == "tiny")
    to_micro = next(r for r in globex.traffic if r.target == "micro")
    body = longest_stream_body(plan, acme, to_tiny, random.Random(0))
    assert (body["max_tokens"], body["stream"], body["model"]) == (1648, True, "tiny")
    assert longest_stream_body(plan, globex, to_micro, random.Random(0))["max_tokens"] == 256
