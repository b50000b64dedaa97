"""What an engine is judged by: its waiting requests, its KV cache use and its time to first token.
The alert rules fire on these and KEDA scales autoscaled engines on them, with the same query and the
same threshold, decided here once from the Plan (docs/decisions.md: Engines scale on vLLM's own
signals, between the reservation and the pool)."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.plan.model import EnginePlan, Plan


@dataclass(frozen=True)
class EngineSignal:
    name: str
    """Short name, also the KEDA trigger's name."""
    alert: str
    """The alert that fires when the query stays above the threshold for `wait`."""
    query: str
    """PromQL returning one series for the engine: its worst replica, or the engine as a whole."""
    threshold: float
    wait: str


def engine_signals(plan: Plan, e: EnginePlan) -> tuple[EngineSignal, ...]:
    """Engine series are selected by their scrape job: the engine's Service on Kubernetes, its job name
    on the local stack. The queue and KV thresholds are where admission starts refusing best-effort
    traffic (gateway.admission); the TTFT threshold is the tightest p95 SLO of the engine's tenants."""
    job = f'job="{e.name}"'
    signals = [
        EngineSignal("waiting", "EngineQueueBacklog", f"max by (job) (vllm:num_requests_waiting{{{job}}})",
                     plan.gateway.shed_best_effort_at_waiting, "10m"),
        EngineSignal("kv-cache", "EngineKvCacheFull", f"max by (job) (vllm:kv_cache_usage_perc{{{job}}})",
                     plan.gateway.shed_best_effort_at_kv_usage, "15m"),
    ]
    tightest_ttft_ms = min((t.ttft_p95_ms for t in plan.tenants if t.name in e.tenants), default=None)
    if tightest_ttft_ms is not None:
        signals.append(EngineSignal(
            "ttft", "EngineTtftHigh",
            f"histogram_quantile(0.95, sum by (job, le) (rate(vllm:time_to_first_token_seconds_bucket{{{job}}}[10m])))",
            tightest_ttft_ms / 1000, "10m"))
    return tuple(signals)
