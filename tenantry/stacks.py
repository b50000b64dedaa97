"""Finding a stack's spec and planning it: the one entry point every consumer uses."""

from __future__ import annotations

from pathlib import Path

from tenantry.findings import PlanRefused
from tenantry.plan import Plan, plan
from tenantry.spec import load_spec, stack_name_of

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"


def stack_path(stack: str) -> Path:
    """A path as given, or a bare stack name looked up in stacks/ ('local' -> stacks/local.yaml)."""
    given = Path(stack)
    if given.suffix in (".yaml", ".yml") or given.exists() or "/" in stack:
        return given
    return STACKS_DIR / f"{stack}.yaml"


def plan_stack(stack: str | Path) -> Plan:
    """Load, validate and plan; raises SpecError for an invalid spec."""
    path = stack_path(str(stack))
    return plan(load_spec(path), stack_name_of(path))


def require_fit(stack_plan: Plan) -> Plan:
    """For consumers that deploy or start things: a plan that does not fit stops them."""
    if not stack_plan.fits:
        raise PlanRefused(stack_plan.stack, stack_plan.refusals)
    return stack_plan
