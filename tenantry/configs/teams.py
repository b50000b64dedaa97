"""The LiteLLM teams and keys the spec asks for: the reconciler's desired state."""

from __future__ import annotations

import hashlib
from typing import Any

from tenantry.gateway.reconciler import MANAGED_BY
from tenantry.plan.model import Plan, TenantPlan

CHAT_ROUTES = ("/chat/completions", "/v1/chat/completions")
COMPLETION_ROUTES = ("/completions", "/v1/completions")
MODEL_LIST_ROUTES = ("/models", "/v1/models")
TENANT_ROUTES = (*CHAT_ROUTES, *COMPLETION_ROUTES, *MODEL_LIST_ROUTES)
"""The inference routes a tenant's key may call (LiteLLM's key-level
`allowed_routes`; a route and the paths below it, e.g. /v1/models/{model}).
Every other authenticated route but the spend view answers 403 to a tenant
key, among them the ones LiteLLM opens to every key: /model/info and /health
(every deployment, other tenants' adapters and the engines' addresses; /health
also makes the gateway call every engine) (docs/decisions.md: A tenant's key
calls the inference API and nothing else). LiteLLM matches them as prefixes;
the front door holds a tenant to the exact routes and methods
(tenantry/gateway/tenant_policy_front_door.py)."""

SPEND_VIEW_ROUTES = {"/key/info": (), "/team/info": ("team_id",)}
"""A tenant's own spend view, these exact paths with the query parameters each takes: /key/info is the
calling key's row (its team_id among it; the front door refuses `?key=`, with which LiteLLM answers any
key's row to whoever holds it), and /team/info?team_id=<its team> the team's: spend in the current
window, budget_reset_at, and the Plan's budget and mode in its metadata. LiteLLM answers another team's
id with a 403 (a team key reads only its own team) (docs/decisions.md: A tenant reads its own spend, and
only its own)."""


def salt_digest(salt: str | None) -> str | None:
    """What the team records of its tenant's cache salt, so an offboarded tenant's salt is never handed to
    another (tenantry/gateway/reconciler.py: OFFBOARDED); a digest, since the tenant reads its team's metadata."""
    return hashlib.sha256(salt.encode()).hexdigest()[:16] if salt else None


def tenant_models(tenant: TenantPlan) -> list[str]:
    """Every name a tenant's key is served: its models, its adapters and the models its requests fall back
    to. The team's model list in LiteLLM and the plugin's one rule read this one list."""
    return [*tenant.models, *tenant.adapters, *tenant.fallback_models]


def desired_teams(plan: Plan) -> list[dict[str, Any]]:
    """One team per tenant with its model allow-list, limits and budget, and
    the settings of its key. The keys themselves are not here: they are
    secrets.

    Concurrency is the tenant-policy plugin's alone, counted across replicas
    in Redis, so the key carries no max_parallel_requests (cleared on keys that
    have one): LiteLLM's own limiter counts a stream until its logging has run,
    after the last byte, and refuses a client holding exactly its limit
    (docs/decisions.md: Concurrency is the plugin's alone)."""
    return [
        {
            "team_alias": t.name,
            "models": tenant_models(t),
            "tpm_limit": t.tpm,
            "rpm_limit": t.rpm,
            "max_budget": t.gateway_max_budget_usd,
            "budget_duration": t.budget_window,
            # The budget as the tenant reads it from /team/info (its spend view): under showback, max_budget
            # is only the runaway guard.
            "metadata": {"managed_by": MANAGED_BY, "tier": t.tier, "stack": plan.stack, "budget_usd": t.budget_usd,
                         "budget_mode": t.budget_mode, "cache_salt_digest": salt_digest(t.cache_salt)},
            "key": {"max_parallel_requests": None, "allowed_routes": [*TENANT_ROUTES, *SPEND_VIEW_ROUTES]},
        }
        for t in plan.tenants
    ]
