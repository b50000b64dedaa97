"""The tenant-policy plugin's own metrics: what admission decided, what it replaced, refused and rerouted,
what it decided in fail-safe, and how long it took (tenant_policy_outcomes counts what tenants got)."""

# No `from __future__ import annotations`: see tenant_policy.py.
from prometheus_client import Counter, Histogram

from tenant_policy_outcomes import registered

ADMISSIONS = registered(Counter, "tenantry_gateway_admissions_total",
                        "Requests admitted or shed by tenantry's admission control; a request the tenant's overload "
                        "fallback tried elsewhere is shed on the engine it asked for, and rerouted-admitted or "
                        "rerouted-shed on each engine tried.", ("tenant", "tier", "engine", "decision", "reason"))
OVERRIDES = registered(Counter, "tenantry_gateway_overrides_total", "Client-sent scheduling fields tenantry replaced.",
                       ("tenant", "field"))
REFUSED = registered(Counter, "tenantry_gateway_refused_total", "Requests refused for exceeding their tier's caps.",
                     ("tenant", "tier", "reason"))
REROUTED = registered(Counter, "tenantry_gateway_rerouted_total",
                      "Requests admission would have refused for an engine's capacity, served instead by the "
                      "tenant's overload fallback: the engine asked for, the one that took it, and why.",
                      ("tenant", "tier", "engine", "to", "reason"))
SHED = registered(Counter, "tenantry_gateway_shed_total",
                  "Requests refused for the platform's capacity, once each, after any overload fallback: admission "
                  "shed them (the reason its X-Tenantry-Shed names), or admitted by tier without Redis. Never a "
                  "tenant's own limits.", ("tenant", "tier", "reason"))
HOOK_SECONDS = registered(Histogram, "tenantry_gateway_policy_seconds", "Time tenantry's pre-call hook adds to a request.",
                          buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
FAILSAFE = registered(Counter, "tenantry_gateway_failsafe_total",
                      "Admission decisions taken in fail-safe: the engine's load unknown or stale (cause metrics), "
                      "or Redis unreachable (cause redis).", ("engine", "tier", "cause"))
