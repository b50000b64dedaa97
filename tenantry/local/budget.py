"""A tenant's budget, capped for a while and restored: the gate's exhaust-budget fault on the local
stack (`tenantry local budget TENANT`).

The cap is the team's spend so far plus an allowance of a few of the tenant's typical requests, so
that the budget runs out mid-run with requests in flight. Restoring puts back the Plan's budget.
Each gateway replica is told, not only one: LiteLLM's /team/update refreshes the cached team of the
replica that served it, and the others would otherwise judge the tenant by a stale team until their
cache lapses.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

from tenantry.gateway.reconciler import GatewayRefused, LiteLLM
from tenantry.local.credentials import master_key
from tenantry.local.health import LocalStackError
from tenantry.local.layout import HOST, Layout, State
from tenantry.plan.model import Plan
from tenantry.showback import model_prices
from tenantry.stacks import plan_stack

ALLOWANCE_REQUESTS = 4
"""The cap leaves the tenant this many of its typical requests (its most expensive model) to spend."""

REPLICA_BACK_SECONDS = 240
"""How long a replica that does not answer is waited for: supervisord restarts a crashed one, and it
takes one to two minutes to load under the gate's load. Skipping it would not do: as it starts it may
read and cache the team before another replica has written the change (the restore in CI found
gateway-0 down: it changed nothing, and left the tenant capped for the tests after it)."""


@dataclass(frozen=True)
class BudgetChange:
    tenant: str
    spent_usd: float
    max_budget_usd: float
    replicas: int


def budget_commands(layout: Layout) -> dict[str, str]:
    """The gate's exhaust-budget fault and its undoing on this stack, with a {tenant} placeholder."""
    command = (f"{shlex.quote(sys.executable)} -m tenantry local budget {{tenant}} "
               f"--dir {shlex.quote(str(layout.root))} --port-base {layout.port_base}")
    return {"exhaust-budget": command, "restore-budget": f"{command} --restore"}


def typical_request_usd(plan: Plan, tenant: str) -> float:
    """What one of the tenant's typical requests costs on the most expensive model it may call."""
    t = plan.tenant(tenant)
    prices = model_prices(plan)
    return max(prices[m].cost(t.typical_prompt_tokens, t.typical_output_tokens) for m in (*t.models, *t.adapters)
               if m in prices)


def change_budget(layout: Layout, tenant: str, restore: bool) -> BudgetChange:
    """Cap the tenant's team budget at its spend plus ALLOWANCE_REQUESTS typical requests, or (restore)
    set it back to the Plan's, on every gateway replica."""
    state = State.load(layout)
    if state is None:
        raise LocalStackError(f"no local stack runs from {layout.root}: start it with `tenantry local up`")
    plan = plan_stack(state.spec)
    if tenant not in {t.name for t in plan.tenants}:
        raise LocalStackError(f"stack {plan.stack} has no tenant {tenant}; its tenants: "
                              f"{', '.join(t.name for t in plan.tenants)}")
    gateways = [LiteLLM(f"http://{HOST}:{port}", master_key(layout)) for port in layout.ports(plan).gateways]
    try:
        return _set_budget(plan, tenant, gateways, restore)
    except (GatewayRefused, OSError) as error:
        raise LocalStackError(f"the budget of {tenant} could not be changed: {error}") from None


def _set_budget(plan: Plan, tenant: str, gateways: list[LiteLLM], restore: bool) -> BudgetChange:
    for gateway in gateways:
        gateway.wait_until_ready(REPLICA_BACK_SECONDS)
    team = next((t for t in gateways[0].teams() if t.get("team_alias") == tenant), None)
    if team is None:
        raise LocalStackError(f"the gateway has no team {tenant}: is the stack up (`tenantry local status`)?")
    spent = float(team.get("spend") or 0.0)
    if restore:
        budget = plan.tenant(tenant).gateway_max_budget_usd
    else:
        budget = spent + ALLOWANCE_REQUESTS * typical_request_usd(plan, tenant)
    for gateway in gateways:
        gateway.call("POST", "/team/update", {"team_id": team["team_id"], "max_budget": budget})
    return BudgetChange(tenant=tenant, spent_usd=spent, max_budget_usd=budget, replicas=len(gateways))
