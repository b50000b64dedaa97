"""The LiteLLM teams and keys the spec asks for: the reconciler's desired state."""

from __future__ import annotations

from typing import Any

from tenantry.gateway.reconciler import MANAGED_BY
from tenantry.plan.model import Plan


def desired_teams(plan: Plan) -> list[dict[str, Any]]:
    """One team per tenant with its model allow-list, limits and budget, and
    the settings of its key (LiteLLM keeps concurrency on keys). The keys
    themselves are not here: they are secrets."""
    return [
        {
            "team_alias": t.name,
            "models": list(t.models) + list(t.adapters) + list(t.fallback_models),
            "tpm_limit": t.tpm,
            "rpm_limit": t.rpm,
            "max_budget": t.budget_usd,
            "budget_duration": t.budget_window,
            "metadata": {"managed_by": MANAGED_BY, "tier": t.tier, "stack": plan.stack},
            "key": {"max_parallel_requests": t.max_concurrency},
        }
        for t in plan.tenants
    ]
