"""What each tenant got, as the gateway saw it: the tenant's side of its SLOs.

vLLM's own latency histograms are per engine (its model_name), not per tenant,
and LiteLLM has no inter-token latency; the alerts burn each tenant's error
budget against its own objectives, so the plugin counts, per tenant and engine,
the requests that produced a first token and those that missed the tenant's
time-to-first-token or inter-token objective (docs/decisions.md: Each tenant's
SLO misses are counted at the gateway). Both are measured from LiteLLM's call to
the engine (its startTime), so the plugin's own admission time, including a
wait at the tenant's concurrency limit, is not in them
(tenantry_gateway_policy_seconds has it).

A request's inter-token latency is its mean gap, (last token - first token) /
(tokens - 1): the gateway sees the stream's chunks only through LiteLLM, which
reports the first and the last; the gate measures every gap client-side.
"""

# No `from __future__ import annotations`: see tenant_policy.py.
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram

from tenant_policy_settings import PolicySettings

LATENCY_LADDER = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_LADDER = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
TENANT_LABELS = ("tenant", "tier", "engine")


def registered(kind: Any, name: str, documentation: str, labels: tuple[str, ...] = (), **options: Any) -> Any:
    """The collector, registered once even when LiteLLM loads the plugin again."""
    existing = REGISTRY._names_to_collectors.get(name)  # noqa: SLF001 - prometheus_client has no public lookup
    return existing if existing is not None else kind(name, documentation, labels, **options)


REQUESTS = registered(Counter, "tenantry_tenant_requests_total",
                      "Requests that produced a first token, by tenant and the engine that served them.",
                      TENANT_LABELS)
SLO_MISSES = registered(Counter, "tenantry_tenant_slo_misses_total",
                        "Of tenantry_tenant_requests_total, those over the tenant's objective: time to first "
                        "token (ttft), mean inter-token latency (itl), or either (any).",
                        (*TENANT_LABELS, "objective"))
PROMPT_TOKENS = registered(Counter, "tenantry_tenant_prompt_tokens_total", "Prompt tokens of completed requests.",
                           TENANT_LABELS)
CACHED_PROMPT_TOKENS = registered(Counter, "tenantry_tenant_cached_prompt_tokens_total",
                                  "Of those, the tokens the engine found in its prefix cache.", TENANT_LABELS)


def latency_histograms(settings: PolicySettings) -> tuple[Any, Any]:
    """Time to first token and inter-token latency per tenant. Every tenant's
    objective is a bucket boundary, so a dashboard's percentile is exact at the
    line it is read against."""
    ttft = sorted({*LATENCY_LADDER, *(t.ttft_objective_seconds for t in settings.tenants.values())})
    itl = sorted({*ITL_LADDER, *(t.itl_objective_seconds for t in settings.tenants.values())})
    return (
        registered(Histogram, "tenantry_tenant_ttft_seconds", "Time to first token per tenant, from the gateway.",
                   TENANT_LABELS, buckets=ttft),
        registered(Histogram, "tenantry_tenant_itl_seconds",
                   "Mean inter-token latency of each streamed request per tenant, from the gateway.",
                   TENANT_LABELS, buckets=itl),
    )


class Outcomes:
    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self.model_engine = {m: name for name, e in settings.engines.items() for m in e.models}
        self.ttft, self.itl = latency_histograms(settings)

    def record(self, payload: Any, response: Any) -> None:
        """One successful request, from LiteLLM's standard logging payload."""
        if not isinstance(payload, dict):
            return
        alias = (payload.get("metadata") or {}).get("user_api_key_team_alias")
        tenant = self.settings.tenants.get(alias) if alias else None
        engine = self.model_engine.get(str(payload.get("model_group")))
        started, first, ended = (payload.get(k) for k in ("startTime", "completionStartTime", "endTime"))
        if tenant is None or engine is None or not all(isinstance(t, (int, float)) for t in (started, first, ended)):
            return
        labels = {"tenant": alias, "tier": tenant.tier, "engine": engine}
        ttft = max(first - started, 0.0)
        tokens = int(payload.get("completion_tokens") or 0)
        itl = (ended - first) / (tokens - 1) if payload.get("stream") and tokens >= 2 else None
        REQUESTS.labels(**labels).inc()
        self.ttft.labels(**labels).observe(ttft)
        missed_ttft = ttft > tenant.ttft_objective_seconds
        missed_itl = itl is not None and itl > tenant.itl_objective_seconds
        if itl is not None:
            self.itl.labels(**labels).observe(max(itl, 0.0))
        for objective, missed in (("ttft", missed_ttft), ("itl", missed_itl), ("any", missed_ttft or missed_itl)):
            # Incremented by 0 too: every objective's series exists from the first request, so the
            # alerts' ratio of misses reads 0, not "no data".
            SLO_MISSES.labels(**labels, objective=objective).inc(1 if missed else 0)
        PROMPT_TOKENS.labels(**labels).inc(int(payload.get("prompt_tokens") or 0))
        CACHED_PROMPT_TOKENS.labels(**labels).inc(cached_tokens(response))


def cached_tokens(response: Any) -> int:
    """usage.prompt_tokens_details.cached_tokens (vLLM --enable-prompt-tokens-details), 0 when absent."""
    usage = getattr(response, "usage", None)
    if usage is None and isinstance(response, dict):
        usage = response.get("usage")
    details = getattr(usage, "prompt_tokens_details", None)
    if details is None and isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
    cached = getattr(details, "cached_tokens", None)
    if cached is None and isinstance(details, dict):
        cached = details.get("cached_tokens")
    return int(cached or 0)
