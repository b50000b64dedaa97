"""The capacity plan: pure functions from a validated Spec to one immutable Plan."""

from tenantry.plan.build import plan
from tenantry.plan.model import Plan

__all__ = ["Plan", "plan"]
