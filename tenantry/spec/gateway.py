"""The LiteLLM gateway: fallbacks between engines and the admission thresholds that shed lower tiers."""

from __future__ import annotations

from tenantry.spec.fields import (
    Name,
    SpecModel,
    field,
)


class FallbackSpec(SpecModel):
    model: Name = field(description="Engine whose failures fall back.")
    to: list[Name] = field(description="Engines tried in order when it fails.", min_length=1)
    include_adapters: bool = field(
        False, description="Also send the engine's LoRA adapters' requests to the fallback engines when it fails, "
        "served by their base model without the adapter: degraded answers instead of errors. Off: adapter "
        "requests fail with their engine."
    )


class AdmissionSpec(SpecModel):
    """When the gateway starts refusing lower tiers, from live engine metrics."""

    shed_spot_at_kv_usage: float = field(
        0.80, description="KV-cache usage above which spot requests are refused.", unit="fraction", gt=0, le=1
    )
    shed_best_effort_at_kv_usage: float = field(
        0.92, description="KV-cache usage above which best-effort requests are refused.", unit="fraction", gt=0, le=1
    )
    shed_spot_at_waiting: int = field(
        1, description="Requests waiting in an engine replica's queue at which spot is refused.", unit="requests", ge=0, le=100_000
    )
    shed_best_effort_at_waiting: int = field(
        4, description="Requests waiting per replica at which best-effort is refused.", unit="requests", ge=0, le=100_000
    )
    spot_pause_after_others_seconds: float = field(
        0, description="After a guaranteed or best-effort request arrives for an engine, spot is refused there for "
        "this long: spot then runs only while the others are away, not beside them. For engines whose front ends "
        "share a few CPU cores (the local stack), where even one spot sequence slows everybody's first token; 0 "
        "keeps spot beside the others in the unreserved slots, behind them in vLLM's priority queue.",
        unit="s", ge=0, le=3600,
    )
    metrics_max_age_seconds: float = field(
        10, description="Oldest engine metrics admission may act on; older counts as unknown (fail safe).",
        unit="s", gt=0, le=3600,
    )
    wait_at_concurrency_limit_ms: int = field(
        250, description="How long a request that finds its tenant at max_concurrency waits for one of the tenant's "
        "requests to finish before it is refused: a stream's slot is freed a moment after its last byte.",
        unit="ms", ge=0, le=60_000,
    )


class GatewaySpec(SpecModel):
    replicas: int = field(2, description="LiteLLM gateway replicas.", ge=1, le=64)
    fallbacks: list[FallbackSpec] = field(default_factory=list, description="Fallbacks between engines.")
    admission: AdmissionSpec = field(default_factory=AdmissionSpec, description="Admission thresholds.")
