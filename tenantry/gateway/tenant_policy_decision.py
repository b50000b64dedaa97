"""Admit or shed one request: the tenant-policy plugin's pure decision.

A tenant's concurrency is capped across every gateway replica; guaranteed
tenants run in the slots the Plan reserved for them; everything else shares
the unreserved slots, and is shed, spot first, when the engine's live load says
it is saturated. When the load is unknown (metrics failing, missing the
engine's series, or sampled longer ago than admission acts on), spot is
refused, best-effort is bounded by the slot counters alone, guaranteed is never
blocked.
"""

import math
from dataclasses import dataclass

from tenant_policy_engine_metrics import EngineState
from tenant_policy_settings import AdmissionSettings, Tier

RETRY_AFTER = {"concurrency": 1, "shared-slots": 2, "best-effort": 2, "spot": 10, "metrics": 10}
"""Seconds a refused client is told to wait, by what refused it."""
CAPACITY_REASONS = frozenset({"shared-slots", "tier-slots", "saturated", "others-active", "contention"})
"""Refusals for an engine's capacity (its slots, its tier's cap, its load, spot's pause, a slot lost to another
replica), which a tenant's overload fallback may route around; never its own limits (concurrency), nor an
unknown load or a lost Redis."""


@dataclass(frozen=True)
class Decision:
    admit: bool
    reason: str
    slot: str | None = None
    """'reserved' or 'shared': which slots an admitted request occupies."""
    message: str = ""
    retry_after: int = 0


def decide(
    *,
    tenant: str,
    tier: Tier,
    engine: str,
    max_concurrency: int,
    tenant_in_flight: int,
    reserved_slots: int,
    reserved_in_flight: int,
    shared_slots: int,
    shared_in_flight: int,
    state: EngineState | None,
    admission: AdmissionSettings,
    replicas: int,
    now: float,
    others_recent: bool = False,
    tier_slots: int | None = None,
    tier_in_flight: int = 0,
) -> Decision:
    """Admit or shed one request. Pure: every path has a unit test. `tier_slots` caps the requests of the
    tenant's tier on the engine (None: no cap beyond the shared slots), `tier_in_flight` of which run now."""
    if tenant_in_flight >= max_concurrency:
        return Decision(False, "concurrency", message=f"tenant {tenant} has {tenant_in_flight} requests in flight, "
                        f"its limit is {max_concurrency}", retry_after=RETRY_AFTER["concurrency"])
    if tier == "guaranteed" and reserved_in_flight < reserved_slots:
        return Decision(True, "reserved", slot="reserved")  # the Plan's reserved slots: never blocked
    if shared_in_flight >= shared_slots:
        return Decision(False, "shared-slots", message=f"engine {engine}: all {shared_slots} unreserved slots are "
                        f"busy; {tier} traffic waits", retry_after=RETRY_AFTER["shared-slots"])
    if tier_slots is not None and tier != "guaranteed" and tier_in_flight >= tier_slots:
        return Decision(False, "tier-slots", message=f"engine {engine}: {tier} traffic has {tier_in_flight} of the "
                        f"{tier_slots} slots its tier may use; it waits", retry_after=RETRY_AFTER["shared-slots"])
    fresh = state is not None and state.fresh(admission.metrics_max_age_seconds, now)
    if tier == "spot":
        return _decide_spot(engine, state if fresh else None, admission, replicas, others_recent)
    # best-effort, or a guaranteed tenant beyond its reservation
    if fresh:
        assert state is not None
        if (state.waiting >= admission.shed_best_effort_at_waiting * replicas
                or state.kv_usage >= admission.shed_best_effort_at_kv_usage):
            return Decision(False, "saturated", message=f"engine {engine} saturated ({state.waiting:.0f} waiting, "
                            f"KV cache {state.kv_usage:.0%}): {tier} traffic above reservations paused",
                            retry_after=RETRY_AFTER["best-effort"])
    return Decision(True, "shared" if fresh else "shared-unknown-load", slot="shared")


def _decide_spot(engine: str, fresh_state: EngineState | None, admission: AdmissionSettings, replicas: int,
                 others_recent: bool) -> Decision:
    """Spot, given a free shared slot: only on an engine idle now and not wanted
    by the other tiers lately."""
    if others_recent:
        pause = admission.spot_pause_after_others_seconds
        return Decision(False, "others-active", message=f"engine {engine} serving guaranteed or best-effort "
                        f"traffic (within the last {pause:g} s): spot traffic paused",
                        retry_after=max(1, math.ceil(pause)))
    if fresh_state is None:
        return Decision(False, "metrics", message=f"engine {engine}: load unknown (metrics unavailable); "
                        "spot traffic paused until they return", retry_after=RETRY_AFTER["metrics"])
    if (fresh_state.waiting >= admission.shed_spot_at_waiting * replicas
            or fresh_state.kv_usage >= admission.shed_spot_at_kv_usage):
        return Decision(False, "saturated", message=f"engine {engine} saturated ({fresh_state.waiting:.0f} waiting, "
                        f"KV cache {fresh_state.kv_usage:.0%}): spot traffic paused", retry_after=RETRY_AFTER["spot"])
    return Decision(True, "idle", slot="shared")
