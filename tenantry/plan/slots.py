"""Sequence slots per engine: reserved for guaranteed tenants, shared by the rest."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenantry.plan.model import Reservation, SlotPlan


@dataclass(frozen=True)
class Demand:
    """One tenant's concurrency on one engine."""

    tenant: str
    tier: str
    concurrency: int


def concurrency_share(max_concurrency: int, share: float) -> int:
    """A tenant's concurrency on one engine: its contract times the share of its
    traffic that lands there, rounded up so no share loses its reservation
    (the 1e-9 keeps 30 x 0.1 from rounding up to 4)."""
    return max(1, math.ceil(max_concurrency * share - 1e-9))


def plan_slots(capacity: int, demands: list[Demand]) -> SlotPlan:
    """Guaranteed tenants get their concurrency as reserved slots nobody else
    can take; best-effort shares the remainder; spot only runs in what is
    idle of that remainder (the gateway sheds it first)."""
    reserved = tuple(Reservation(tenant=d.tenant, slots=d.concurrency) for d in demands if d.tier == "guaranteed")
    reserved_total = sum(r.slots for r in reserved)
    return SlotPlan(
        capacity=capacity,
        reserved=reserved,
        reserved_total=reserved_total,
        shared=max(0, capacity - reserved_total),
        best_effort_demand=sum(d.concurrency for d in demands if d.tier == "best-effort"),
        spot_demand=sum(d.concurrency for d in demands if d.tier == "spot"),
    )
