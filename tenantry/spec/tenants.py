"""Tenants and their contracts (limits, budget, SLOs, typical request, traffic), and the tiers' policies."""

from __future__ import annotations

from pydantic import model_validator

from tenantry.spec.fields import (
    WINDOW_PATTERN,
    BudgetMode,
    CacheIsolationMode,
    CacheSalt,
    IsolationLevel,
    Name,
    SpecModel,
    Tier,
    TrafficProfile,
    field,
)


class BudgetSpec(SpecModel):
    usd: float = field(description="Spend allowed per window, priced at the plan's per-token cost.", unit="USD", gt=0, le=1e9)
    window: str = field(
        "30d", description="Budget reset period: a number and s, m, h, d, w or mo (30d, 1mo, 12h).",
        pattern=WINDOW_PATTERN,
    )
    alert_at: list[float] = field(
        default_factory=lambda: [0.5, 0.8, 0.95],
        description="Shares of the budget whose spending raises TenantBudgetSpent: the first informs, the second "
        "warns, the third is critical (seed 004's 50/80/95 %).",
        unit="fraction", min_length=1, max_length=3,
    )
    mode: BudgetMode = field(
        "chargeback", description="chargeback: the gateway refuses the tenant's requests once the window's spend "
        "reaches the budget; showback: it records the spend and raises the same alerts, and serves on (seed 004: "
        "months of showback before chargeback). A showback tenant is refused only as a runaway, at 1000 times its "
        "budget.",
    )

    @model_validator(mode="after")
    def _alert_shares(self) -> BudgetSpec:
        if any(not 0 < share <= 1 for share in self.alert_at):
            raise ValueError(f"alert_at: each share must be > 0 and <= 1, got {self.alert_at}")
        if sorted(set(self.alert_at)) != self.alert_at:
            raise ValueError(f"alert_at: shares must rise, each once, got {self.alert_at}")
        return self


class CacheIsolationSpec(SpecModel):
    isolation: CacheIsolationMode = field(
        "own", description="own: a salt only this tenant's requests carry; shared: a salt shared by a named "
        "group of tenants; none: the unsalted, common prefix cache.",
    )
    salt: CacheSalt | None = field(
        None, description="The own salt (isolation: own); defaults to tenant-<name>. At most 128 characters, "
        "no @, /, backslash or NUL.",
    )
    group: Name | None = field(None, description="The shared group's name (isolation: shared).")

    @model_validator(mode="after")
    def _mode_fields(self) -> CacheIsolationSpec:
        if self.isolation == "shared" and self.group is None:
            raise ValueError("isolation 'shared' needs a group")
        if self.isolation != "shared" and self.group is not None:
            raise ValueError(f"group only applies to isolation 'shared', not '{self.isolation}'")
        if self.isolation != "own" and self.salt is not None:
            raise ValueError(f"salt only applies to isolation 'own', not '{self.isolation}'")
        return self


class SloSpec(SpecModel):
    ttft_p95_ms: float = field(description="95th percentile time to first token.", unit="ms", gt=0, le=3_600_000)
    itl_p95_ms: float = field(description="95th percentile inter-token latency.", unit="ms", gt=0, le=600_000)
    max_error_rate: float = field(
        description="Largest share of requests that may fail (5xx, timeouts); the tenant's own 429s excluded.",
        unit="fraction", gt=0, le=1,
    )


class TypicalRequestSpec(SpecModel):
    prompt_tokens: int = field(1024, description="Typical prompt length.", unit="tokens", ge=1, le=10_000_000)
    output_tokens: int = field(256, description="Typical output length.", unit="tokens", ge=1, le=10_000_000)


class TrafficShareSpec(SpecModel):
    target: str = field(description="An engine or adapter the tenant is allowed.")
    share: float = field(description="Share of the tenant's requests; shares sum to 1.", unit="fraction", gt=0, le=1)
    profile: TrafficProfile = field(
        "chat", description="Request shape the load-test gate sends: chat (short, streamed), rag (long shared "
        "prefix), batch (non-streamed)."
    )


class NamespaceQuotaSpec(SpecModel):
    """Limits of the tenant's own namespace, where its applications and its gateway key live.
    GPUs are always quota 0 there: tenants reach models only through the gateway."""

    cpu: float = field(8, description="CPU requests allowed in the namespace.", unit="cores", gt=0, le=100_000)
    memory_gib: float = field(16, description="Memory requests allowed in the namespace.", unit="GiB", gt=0, le=1_000_000)
    pods: int = field(50, description="Pods allowed in the namespace.", unit="pods", ge=1, le=100_000)


class TenantSpec(SpecModel):
    name: Name = field(description="Tenant name; its namespace is tenant-<name>.")
    tier: Tier = field(description="guaranteed (reserved slots), best-effort (shares the rest) or spot (idle capacity only).")
    models: list[Name] = field(default_factory=list, description="Engines the tenant may call.")
    adapters: list[Name] = field(default_factory=list, description="LoRA adapters the tenant may call (its own).")
    overload_fallback: list[Name] = field(
        default_factory=list, description="Engines of its own models that serve the tenant's request, tried in order, "
        "when admission would refuse it for its engine's capacity (its unreserved slots, its tier's cap, its load, "
        "spot's pause); never for the tenant's own limits. The answer carries X-Tenantry-Rerouted.",
    )
    tpm: int = field(description="Tokens (prompt + output) per minute.", unit="tokens/min", ge=1, le=10_000_000_000)
    rpm: int = field(description="Requests per minute.", unit="requests/min", ge=1, le=100_000_000)
    max_concurrency: int = field(description="Requests in flight at once.", unit="requests", ge=1, le=1_000_000)
    budget: BudgetSpec = field(description="Spend limit and its window.")
    cache: CacheIsolationSpec = field(default_factory=CacheIsolationSpec, description="Prefix-cache isolation.")
    isolation: IsolationLevel = field(
        "shared", description="What the tenant's requests share, checked by the Plan against the engines and pools "
        "and enforced by the rendered objects: shared (co-batched with others, its own cache salt), adapter (only "
        "its own adapters on a shared base, never the base model itself), mig (only engines on MIG slices that no "
        "other tenant's traffic reaches), dedicated-replica (only engines no other tenant reaches), dedicated-node "
        "(as dedicated-replica, on pools that run no other tenant's engine).",
    )
    slo: SloSpec = field(description="Latency and error objectives the load-test gate checks.")
    typical: TypicalRequestSpec = field(default_factory=TypicalRequestSpec, description="Typical request size, for planning.")
    traffic: list[TrafficShareSpec] | None = field(
        None, description="How requests split over the allowed engines and adapters; defaults to an even split."
    )
    namespace_quota: NamespaceQuotaSpec = field(
        default_factory=NamespaceQuotaSpec, description="Quota of the tenant's namespace on Kubernetes."
    )


class TierPolicySpec(SpecModel):
    priority: int = field(description="vLLM scheduling priority (lower runs first).", ge=-1000, le=1000)
    max_prompt_tokens: int | None = field(
        None, description="Longest prompt accepted from this tier; omit for the engine's limit.", unit="tokens", ge=1, le=10_000_000
    )
    max_output_tokens: int | None = field(
        None, description="Largest max_tokens accepted from this tier; omit for the engine's limit.", unit="tokens", ge=1, le=10_000_000
    )
    max_engine_slots: int | None = field(
        None, description="Most sequences this tier may run at once on one engine, over all its replicas, within "
        "the engine's unreserved slots; omit for no cap beyond those. Best-effort and spot only: guaranteed tenants "
        "hold reserved slots.", unit="sequences", ge=0, le=1_000_000
    )


class TiersSpec(SpecModel):
    """Coarse priority levels: interactive work first, batch last."""

    guaranteed: TierPolicySpec = field(default_factory=lambda: TierPolicySpec(priority=0), description="Guaranteed tier.")
    best_effort: TierPolicySpec = field(
        default_factory=lambda: TierPolicySpec(priority=10), alias="best-effort", description="Best-effort tier."
    )
    spot: TierPolicySpec = field(default_factory=lambda: TierPolicySpec(priority=100), description="Spot tier.")

    def policy(self, tier: Tier) -> TierPolicySpec:
        return {"guaranteed": self.guaranteed, "best-effort": self.best_effort, "spot": self.spot}[tier]
