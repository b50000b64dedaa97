"""LiteLLM's proxy config and the tenant-policy plugin's settings, from the Plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenantry.configs.teams import (CHAT_ROUTES, COMPLETION_ROUTES, MODEL_LIST_ROUTES, SPEND_VIEW_ROUTES,
                                    tenant_models)
from tenantry.plan.model import EnginePlan, Plan

POLICY_CALLBACK = "tenant_policy.proxy_handler_instance"
"""The plugin's module (mounted next to the config) and the instance LiteLLM loads."""
PLUGIN_FILES = (
    "tenant_policy.py",
    "tenant_policy_settings.py",
    "tenant_policy_contract.py",
    "tenant_policy_engine_metrics.py",
    "tenant_policy_front_door.py",
    "tenant_policy_request.py",
    "tenant_policy_errors.py",
    "tenant_policy_ledger.py",
    "tenant_policy_decision.py",
    "tenant_policy_outcomes.py",
    "tenant_policy_metrics.py",
    "tenant_policy_gc.py",
)
"""The plugin's files in tenantry/gateway/, shipped side by side next to the
config: LiteLLM loads the first (POLICY_CALLBACK), which imports the others
(docs/decisions.md: The plugin's modules load as neighbours)."""

GATEWAY_ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost-map download at boot
    # No admin UI: /ui and /sso/key/generate would serve its login page to anyone
    # (docs/decisions.md: A tenant's key calls the inference API and nothing else).
    "DISABLE_ADMIN_UI": "True",
    # A crash in native code leaves every thread's Python stack in the log.
    "PYTHONFAULTHANDLER": "1",
    # How long LiteLLM keeps an idle connection to an engine (its default, pinned): shorter than the
    # engines keep one open (configs/vllm.py: IDLE_CONNECTION_SECONDS), so the client always closes first.
    "AIOHTTP_KEEPALIVE_TIMEOUT": "15",
    # How long the gateway's own server keeps a client's idle connection (uvicorn's default is 5 s): longer
    # than the 60 s idle timeout of the usual L7 load balancers and of clients' pools, so that the client
    # side closes first. A server closing as a client reuses the connection fails that request with
    # "Remote end closed connection without response" (the gate's overload scenario, 2026-12-04).
    "KEEPALIVE_TIMEOUT": "75",
}
"""What every gateway process runs with, on Kubernetes and on the local stack, besides its secrets."""

LIVENESS_PATH = "/health/liveliness"
READINESS_PATH = "/health/readiness"
OPEN_ROUTES = (LIVENESS_PATH, READINESS_PATH)
"""What anyone reaches without a key: the probes of the kubelet and of the local stack (LiteLLM's
liveness answers "I'm alive!", its readiness the status of the process and its database)."""


METRICS_CACHE_SECONDS = 1.0
"""How long the tenant-policy plugin acts on an engine's load without asking again: a burst of requests costs one
scrape, and spot, which may run only on capacity idle now, is never judged on a state older than this."""
METRICS_TIMEOUT_SECONDS = 1.0
"""The plugin's bound on one scrape: past it the load is unknown (spot paused, best-effort on slot counts)."""
REQUEST_TIMEOUT_SECONDS = 600
"""LiteLLM's timeout for one call to an engine; a kv-aware engine's HTTPRoute holds a request as long."""


def litellm_config(plan: Plan, api_base: Callable[[EnginePlan], str]) -> dict[str, Any]:
    """A model_list entry per engine and per adapter, priced from the Plan (so
    spend is GPU cost), fallbacks, Redis for limits shared across replicas, the
    Prometheus callback and the tenant-policy plugin. Secrets are read from the
    environment, never written here."""
    model_list = []
    for engine in plan.engines:
        prices = {
            "input_cost_per_token": engine.tokens.usd_per_1k_input_tokens / 1000,
            "output_cost_per_token": engine.tokens.usd_per_1k_output_tokens / 1000,
        }
        for served in (engine.name, *(a.name for a in engine.lora.adapters)):
            model_list.append({
                "model_name": served,
                "litellm_params": {
                    # hosted_vllm/ forwards vLLM's own request fields (priority, cache_salt).
                    "model": f"hosted_vllm/{served}",
                    "api_base": api_base(engine),
                    **prices,
                },
                "model_info": {"id": served, "base_engine": engine.name},
            })
    return {
        "model_list": model_list,
        "router_settings": {
            "fallbacks": [{model: list(f.to)} for f in plan.gateway.fallbacks for model in (f.model, *f.adapters)],
            # A failed call goes to its fallback at once: LiteLLM's default retries of the
            # same engine, with backoff, hold every request while an engine is down, beyond
            # the guaranteed tiers' TTFT SLOs; replicas behind an engine's Service and
            # readiness probes cover restarts (docs/decisions.md: No retries before the fallback).
            "num_retries": 0,
            # No failure takes a model out of service for every tenant, whoever caused it
            # (docs/decisions.md: No cooldowns).
            "disable_cooldowns": True,
            "redis_host": "os.environ/REDIS_HOST",
            "redis_port": "os.environ/REDIS_PORT",
            "redis_password": "os.environ/REDIS_PASSWORD",
        },
        "litellm_settings": {
            "callbacks": ["prometheus", POLICY_CALLBACK],
            # LiteLLM's own view of PostgreSQL and Redis (litellm_postgres_*, litellm_redis_*): the alerts on
            # an unreachable database or Redis and on failing spend writes read them.
            "service_callback": ["prometheus_system"],
            "request_timeout": REQUEST_TIMEOUT_SECONDS,
            # LiteLLM reads its loop guard from this module attribute, which litellm_settings sets.
            "REPEATED_STREAMING_CHUNK_LIMIT": plan.gateway.repeated_chunk_limit,
        },
        "general_settings": {
            "master_key": "os.environ/LITELLM_MASTER_KEY",
            "database_url": "os.environ/DATABASE_URL",
            "store_model_in_db": False,
            "proxy_batch_write_at": plan.gateway.spend_write_seconds,
            # A refused or failed request is counted in Prometheus (by tenant, reason and status),
            # not written to PostgreSQL: LiteLLM's error log is a spend-log row per failure, so a
            # tenant flooding refused requests would turn its flood into database writes and
            # gateway time shared with every tenant (docs/decisions.md: Refusals are counted, not logged).
            "disable_error_logs": True,
        },
    }


def tenant_policy_settings(
    plan: Plan, *, metrics_urls: dict[str, list[str]] | None = None, prometheus_url: str | None = None
) -> dict[str, Any]:
    """What the tenant-policy plugin enforces, per tenant (keyed by the team
    alias the reconciler gives it) and per engine, and where it reads the
    engines' live load: each replica's /metrics (`metrics_urls`, the local
    stack) or Prometheus (`prometheus_url`, Kubernetes, where a Service hides
    the replicas). Every key is written, even when None: the plugin requires
    them all, so every default is decided here."""
    return {
        "metrics": {"cache_seconds": METRICS_CACHE_SECONDS, "timeout_seconds": METRICS_TIMEOUT_SECONDS,
                    "prometheus_url": prometheus_url},
        "tenants": {
            t.name: {
                "tier": t.tier,
                "models": tenant_models(t),
                "priority": t.priority,
                "cache_salt": t.cache_salt,
                "max_concurrency": t.max_concurrency,
                "max_prompt_tokens": t.max_prompt_tokens,
                "max_output_tokens": t.max_output_tokens,
                "ttft_objective_seconds": t.ttft_p95_ms / 1000,
                "itl_objective_seconds": t.itl_p95_ms / 1000,
                "overload_fallback": list(t.overload_fallback),
            }
            for t in plan.tenants
        },
        "engines": {
            e.name: {
                "replicas": e.replicas, "max_replicas": e.most_replicas, "max_num_seqs": e.kv.max_num_seqs,
                "shared_slots": e.slots.shared,
                "reserved": {r.tenant: r.slots for r in e.slots.reserved},
                "tier_slots": {tier: cap for tier, cap in (("best-effort", e.slots.best_effort_max),
                                                           ("spot", e.slots.spot_max)) if cap is not None},
                "models": [e.name, *(a.name for a in e.lora.adapters)],
                "metrics_urls": (metrics_urls or {}).get(e.name, []),
                "objectives": {o.tier: o.name for o in e.routing.objectives} if e.routing else {},
            }
            for e in plan.engines
        },
        "admission": {
            "shed_spot_at_kv_usage": plan.gateway.shed_spot_at_kv_usage,
            "shed_best_effort_at_kv_usage": plan.gateway.shed_best_effort_at_kv_usage,
            "shed_spot_at_waiting": plan.gateway.shed_spot_at_waiting,
            "shed_best_effort_at_waiting": plan.gateway.shed_best_effort_at_waiting,
            "metrics_max_age_seconds": plan.gateway.metrics_max_age_seconds,
            "wait_at_concurrency_limit_seconds": plan.gateway.wait_at_concurrency_limit_seconds,
            "spot_pause_after_others_seconds": plan.gateway.spot_pause_after_others_seconds,
        },
        "front_door": {
            "chat_routes": list(CHAT_ROUTES),
            "completion_routes": list(COMPLETION_ROUTES),
            "model_list_routes": list(MODEL_LIST_ROUTES),
            "open_routes": list(OPEN_ROUTES),
            "spend_view_routes": {path: list(parameters) for path, parameters in SPEND_VIEW_ROUTES.items()},
            "max_request_bytes": plan.gateway.max_request_bytes,
            "request_read_seconds": plan.gateway.request_read_seconds,
        },
    }
