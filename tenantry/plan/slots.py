"""Sequence slots per engine: reserved for guaranteed tenants, shared by the rest."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenantry.plan.model import KvPlan, Reservation, SlotPlan
from tenantry.plan.notes import EngineNotes
from tenantry.spec.schema import Tier

RESERVED_SHARE_WARNING = 0.5
"""Guaranteed tenants reserving more than this share of an engine's slots get a warning (docs/decisions.md:
Guarantees are for the few)."""


@dataclass(frozen=True, kw_only=True)
class Demand:
    """One tenant's concurrency on one engine."""

    tenant: str
    tier: Tier
    concurrency: int


def concurrency_share(max_concurrency: int, share: float) -> int:
    """A tenant's concurrency on one engine: its contract times the share of its
    traffic that lands there, rounded up so no share loses its reservation
    (the 1e-9 keeps 30 x 0.1 from rounding up to 4)."""
    return max(1, math.ceil(max_concurrency * share - 1e-9))


def plan_slots(capacity: int, demands: list[Demand], caps: dict[Tier, int | None] | None = None) -> SlotPlan:
    """Guaranteed tenants get their concurrency as reserved slots nobody else
    can take; best-effort shares the remainder; spot only runs in what is
    idle of that remainder (the gateway sheds it first). `caps` bound a tier's
    sequences on the engine within that remainder (tiers.<tier>.max_engine_slots)."""
    caps = caps or {}
    reserved = tuple(Reservation(tenant=d.tenant, slots=d.concurrency) for d in demands if d.tier == "guaranteed")
    reserved_total = sum(r.slots for r in reserved)
    return SlotPlan(
        capacity=capacity,
        reserved=reserved,
        reserved_total=reserved_total,
        shared=max(0, capacity - reserved_total),
        best_effort_demand=sum(d.concurrency for d in demands if d.tier == "best-effort"),
        spot_demand=sum(d.concurrency for d in demands if d.tier == "spot"),
        best_effort_max=caps.get("best-effort"),
        spot_max=caps.get("spot"),
    )


def plan_engine_slots(
    replicas: int, kv: KvPlan, engine_demands: list[Demand], caps: dict[Tier, int | None], *, memory_fits: bool,
    notes: EngineNotes,
) -> SlotPlan:
    """The engine's slots, refused when guaranteed tenants reserve more than it runs, or a tier's cap is more
    than the slots it could ever use here. Slot figures mean nothing for an engine whose weights or one
    sequence do not fit (`memory_fits` false): the memory refusal already says what to change."""
    slots = plan_slots(kv.max_num_seqs * replicas, engine_demands, caps)
    if not memory_fits:
        return slots
    for tier, cap in caps.items():
        if cap is not None and cap > slots.shared and any(d.tier == tier for d in engine_demands):
            notes.notes.refuse(
                f"tiers.{tier}.max_engine_slots",
                f"{cap} is more than the {slots.shared} unreserved slots of {notes.who}, the most {tier} traffic "
                f"can run there: the cap would never bind; at most {slots.shared}",
            )
    if slots.reserved_total > slots.capacity:
        owners = ", ".join(f"{r.tenant} {r.slots}" for r in slots.reserved)
        notes.refuse(
            None,
            f"guaranteed tenants reserve {slots.reserved_total} concurrent sequences ({owners}) but the engine "
            f"runs {slots.capacity} ({kv.max_num_seqs} per replica x {replicas}, at a typical context of "
            f"{kv.typical_context:,} tokens); add replicas or lower their max_concurrency",
        )
    elif slots.reserved_total > RESERVED_SHARE_WARNING * slots.capacity:
        notes.warn(
            None,
            f"guaranteed tenants reserve {slots.reserved_total} of {slots.capacity} concurrent sequences "
            f"({slots.reserved_total / slots.capacity:.0%}): reserved slots stand idle while their owners are quiet, "
            f"and every other tenant shares the {slots.shared} left",
        )
    if slots.reserved_total <= slots.capacity and slots.best_effort_demand > slots.shared:
        notes.warn(
            None,
            f"best-effort tenants may have {slots.best_effort_demand} requests in flight but only "
            f"{slots.shared} slots are not reserved; the rest queue or get 429s",
        )
    if slots.spot_demand and slots.shared == 0 and slots.reserved_total <= slots.capacity:
        notes.warn(None, "no unreserved slots: spot tenants will never be admitted")
    return slots
