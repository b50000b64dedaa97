"""The tenant-policy plugin's decision, path by path: admit or shed one
request, from the counts and the engine's load (a pure function)."""

from __future__ import annotations

import pytest

from tests.unit.policy_plugin import decision as policy_decision, engine_metrics, settings

ADMISSION = settings.AdmissionSettings(
    shed_spot_at_kv_usage=0.8, shed_best_effort_at_kv_usage=0.92, shed_spot_at_waiting=1, shed_best_effort_at_waiting=4,
    metrics_max_age_seconds=10, wait_at_concurrency_limit_seconds=0.25, spot_pause_after_others_seconds=7.5)
NOW = 1_000_000.0
IDLE = engine_metrics.EngineState(running=1, waiting=0, kv_usage=0.1, replicas=1, sampled_at=NOW, fetched_at=NOW)


def decide(tier="best-effort", *, state=IDLE, tenant_in_flight=0, max_concurrency=4, reserved_slots=0,
           reserved_in_flight=0, shared_slots=4, shared_in_flight=0, replicas=1, others_recent=False, tier_slots=None,
           tier_in_flight=0):
    return policy_decision.decide(
        tenant="t", tier=tier, engine="e", max_concurrency=max_concurrency, tenant_in_flight=tenant_in_flight,
        reserved_slots=reserved_slots, reserved_in_flight=reserved_in_flight, shared_slots=shared_slots,
        shared_in_flight=shared_in_flight, state=state, admission=ADMISSION, replicas=replicas, now=NOW,
        others_recent=others_recent, tier_slots=tier_slots, tier_in_flight=tier_in_flight)


def saturated(waiting=5, kv=0.5):
    return engine_metrics.EngineState(running=8, waiting=waiting, kv_usage=kv, replicas=1, sampled_at=NOW, fetched_at=NOW)


STALE = engine_metrics.EngineState(running=0, waiting=0, kv_usage=0, replicas=1, sampled_at=NOW - 60, fetched_at=NOW)


@pytest.mark.parametrize("tier", ["guaranteed", "best-effort", "spot"])
def test_a_tenant_at_its_concurrency_limit_is_refused_whatever_its_tier(tier):
    decision = decide(tier, tenant_in_flight=4, reserved_slots=8)
    assert (decision.admit, decision.reason, decision.retry_after) == (False, "concurrency", 1)
    assert "limit is 4" in decision.message


@pytest.mark.parametrize("state", [IDLE, saturated(waiting=99, kv=0.99), STALE, None],
                         ids=["idle", "saturated", "stale", "none"])
def test_guaranteed_within_its_reservation_is_always_admitted(state):
    decision = decide("guaranteed", state=state, reserved_slots=2, reserved_in_flight=1, shared_in_flight=4)
    assert (decision.admit, decision.slot) == (True, "reserved")


def test_guaranteed_beyond_its_reservation_competes_for_shared_slots():
    assert decide("guaranteed", reserved_slots=2, reserved_in_flight=2).slot == "shared"
    full = decide("guaranteed", reserved_slots=2, reserved_in_flight=2, shared_in_flight=4)
    assert (full.admit, full.reason) == (False, "shared-slots")
    busy = decide("guaranteed", reserved_slots=2, reserved_in_flight=2, state=saturated(waiting=4))
    assert (busy.admit, busy.reason) == (False, "saturated") and "above reservations" in busy.message


def test_best_effort_never_takes_reserved_slots():
    decision = decide("best-effort", shared_slots=4, shared_in_flight=4)
    assert (decision.admit, decision.reason) == (False, "shared-slots")
    assert "unreserved slots are busy" in decision.message


@pytest.mark.parametrize(("state", "admitted"), [
    (saturated(waiting=3), True), (saturated(waiting=4), False), (saturated(waiting=0, kv=0.92), False),
    (saturated(waiting=0, kv=0.91), True),
])
def test_best_effort_is_shed_at_its_thresholds(state, admitted):
    decision = decide("best-effort", state=state)
    assert decision.admit is admitted
    if not admitted:
        assert decision.reason == "saturated" and decision.retry_after == 2


@pytest.mark.parametrize("state", [STALE, None], ids=["stale", "none"])
def test_best_effort_with_unknown_load_is_bounded_by_the_slot_counters_alone(state):
    assert decide("best-effort", state=state) == policy_decision.Decision(True, "shared-unknown-load", slot="shared")
    assert not decide("best-effort", state=state, shared_in_flight=4).admit


@pytest.mark.parametrize(("state", "admitted"), [
    (IDLE, True), (saturated(waiting=1), False), (saturated(waiting=0, kv=0.8), False),
    (saturated(waiting=0, kv=0.79), True),
])
def test_spot_runs_only_on_an_idle_engine(state, admitted):
    decision = decide("spot", state=state)
    assert decision.admit is admitted
    if not admitted:
        assert decision.reason == "saturated" and "spot traffic paused" in decision.message
        assert decision.retry_after == 10


@pytest.mark.parametrize("state", [STALE, None], ids=["stale", "none"])
def test_spot_is_refused_when_the_load_is_unknown(state):
    decision = decide("spot", state=state)
    assert (decision.admit, decision.reason) == (False, "metrics")
    assert "metrics unavailable" in decision.message


def test_spot_needs_a_free_shared_slot_too():
    assert decide("spot", shared_in_flight=4).reason == "shared-slots"


@pytest.mark.parametrize("tier", ["guaranteed", "best-effort"])
def test_only_spot_pauses_while_the_others_are_recent(tier):
    decision = decide("spot", others_recent=True)
    assert (decision.admit, decision.reason, decision.retry_after) == (False, "others-active", 8)
    assert decision.message == ("engine e serving guaranteed or best-effort traffic (within the last 7.5 s): "
                                "spot traffic paused")
    assert decide(tier, others_recent=True).admit


def test_waiting_thresholds_scale_with_replicas():
    assert not decide("spot", state=saturated(waiting=1), replicas=1).admit
    assert decide("spot", state=saturated(waiting=1, kv=0.1), replicas=2).admit


@pytest.mark.parametrize("tier", ["best-effort", "spot"])
def test_a_capped_tier_is_refused_at_its_cap_with_shared_slots_still_free(tier):
    below = decide(tier, tier_slots=2, tier_in_flight=1, shared_in_flight=1, others_recent=False)
    assert below.admit and below.slot == "shared"
    at_cap = decide(tier, tier_slots=2, tier_in_flight=2, shared_in_flight=2)
    assert (at_cap.admit, at_cap.reason, at_cap.retry_after) == (False, "tier-slots", 2)
    assert f"{tier} traffic has 2 of the 2 slots" in at_cap.message


def test_a_tier_cap_never_touches_guaranteed():
    decision = decide("guaranteed", reserved_slots=1, reserved_in_flight=1, tier_slots=0, tier_in_flight=5)
    assert (decision.admit, decision.slot) == (True, "shared")
