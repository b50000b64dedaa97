"""The platform spec: what a platform team writes in stacks/<stack>.yaml.

Typed with pydantic v2 in strict mode: YAML scalars must already be the right
type (a quoted "5" is not a number, 1.30 is not the string "1.30"), unknown
keys are refused, and every field carries a description and a unit that the
README's spec reference is generated from (`python -m tenantry.docs`).
Checks that span fields or need the catalog live in references.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Tier = Literal["guaranteed", "best-effort", "spot"]
TIERS: tuple[Tier, ...] = ("guaranteed", "best-effort", "spot")
WeightDtype = Literal["bf16", "fp8", "int4-awq"]
KvCacheDtype = Literal["auto", "fp8"]
LoraModule = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TrafficProfile = Literal["chat", "rag", "batch"]
CacheIsolationMode = Literal["own", "shared", "none"]

# Names become Kubernetes object names (Services need RFC 1035 labels) and
# gateway model names, so one rule serves all of them.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, min_length=1, max_length=50)]
# Kubernetes node names are DNS subdomains.
NodeName = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253)
]
ModelName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=100)]
SOURCE_PATTERN = r"^(hf|s3|gs|pvc|local)://\S+$"
SourceUri = Annotated[str, Field(pattern=SOURCE_PATTERN, max_length=500)]
KUBERNETES_VERSION_PATTERN = r"^1\.(2[5-9]|3[0-7])$"
WINDOW_PATTERN = r"^[1-9][0-9]{0,4}(s|m|h|d|w|mo)$"
OBJECT_STORE_PATTERN = r"^(s3|gs)://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?$"
SIX_FIELD_CRON_PATTERN = r"^\S+ \S+ \S+ \S+ \S+ \S+$"

UNPINNED_REVISIONS = {"latest", "main", "master", "head", "stable"}


def _pinned(revision: str) -> str:
    if revision.lower() in UNPINNED_REVISIONS:
        raise ValueError(f"'{revision}' moves over time; pin a commit or a release tag")
    return revision


Revision = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9._-]+$", min_length=1, max_length=100), AfterValidator(_pinned)
]


def _valid_cache_salt(salt: str) -> str:
    # vLLM refuses these salts with a 400 (see ../shared/notes/toolchain.md);
    # refusing them here keeps that error out of production.
    if not salt:
        raise ValueError("must not be empty")
    if len(salt) > 128:
        raise ValueError(f"must be at most 128 characters, got {len(salt)}")
    for bad, label in (("@", "'@'"), ("/", "'/'"), ("\\", "a backslash"), ("\0", "a NUL byte")):
        if bad in salt:
            raise ValueError(f"must not contain {label} (vLLM refuses such salts)")
    return salt


CacheSalt = Annotated[str, AfterValidator(_valid_cache_salt)]


def field(default: Any = ..., *, description: str, unit: str | None = None, **constraints: Any) -> Any:
    """A documented field; `unit` is shown in the README's spec reference."""
    extra = {"unit": unit} if unit else None
    return Field(default, description=description, json_schema_extra=extra, **constraints)


class SpecModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, populate_by_name=False
    )


# --- cluster ---------------------------------------------------------------------------------


class NodePoolSpec(SpecModel):
    """A group of identical GPU nodes."""

    name: Name = field(description="Pool name; nodes are labelled with it and engines are placed on it.")
    gpu: str = field(
        description="GPU type from the catalog: A100-40GB, A100-80GB, H100-80GB-SXM, H100-80GB-PCIe, "
        "H200-141GB, L40S-48GB, B200, or CPU (the local stack).",
    )
    gpus_per_node: int = field(description="GPUs in each node.", unit="GPUs", ge=1, le=16)
    nodes: int = field(1, description="Nodes in the pool.", unit="nodes", ge=1, le=1000)
    gpu_hour_price_usd: float = field(
        description="What one GPU costs per hour; token prices and tenant spend derive from it.",
        unit="USD per GPU-hour", gt=0, le=1000,
    )
    mig_layout: list[str] | None = field(
        None,
        description="MIG profiles carved out of every GPU of the pool (for example "
        "[3g.40gb, 2g.20gb, 2g.20gb]); omit for whole GPUs. Must be a combination the GPU accepts.",
        min_length=1, max_length=7,
    )
    node_names: list[NodeName] | None = field(
        None,
        description="Kubernetes names of the pool's nodes; tenantry labels and taints them. Omit when the "
        "nodes already carry the label tenantry.io/pool=<name> and the matching taint (Ansible sets both).",
        min_length=1, max_length=1000,
    )


class ClusterSpec(SpecModel):
    kubernetes_version: str = field(
        "1.31",
        description="Kubernetes minor version of the target cluster (quoted: \"1.31\"); manifests are "
        "validated against its schemas.",
        pattern=KUBERNETES_VERSION_PATTERN,
    )
    node_pools: list[NodePoolSpec] = field(description="The cluster's GPU node pools.", min_length=1)


# --- engines ---------------------------------------------------------------------------------


class ArchitectureSpec(SpecModel):
    """The shape of a model that is not in the catalog."""

    layers: int = field(description="Decoder layers.", ge=1, le=1000)
    hidden_size: int = field(description="Hidden (model) dimension.", ge=1, le=1_000_000)
    attention_heads: int = field(description="Query attention heads.", ge=1, le=10_000)
    kv_heads: int = field(description="Key/value heads (fewer than attention heads with GQA).", ge=1, le=10_000)
    head_dim: int = field(description="Dimension of one attention head.", ge=1, le=10_000)
    intermediate_size: int = field(description="MLP intermediate dimension (per expert for MoE).", ge=1, le=10_000_000)
    vocab_size: int = field(description="Vocabulary size (embeddings stay 16-bit when weights are quantised).", ge=1, le=10_000_000)
    total_parameters: int = field(
        description="All parameters, every expert included: weight memory follows this.",
        unit="parameters", ge=1, le=100_000_000_000_000,
    )
    max_context: int = field(description="Longest context the model supports.", unit="tokens", ge=16, le=10_000_000)
    experts: int = field(1, description="Experts per MoE layer; 1 for a dense model.", ge=1, le=1024)
    active_experts: int = field(1, description="Experts each token is routed to.", ge=1, le=1024)
    tie_word_embeddings: bool = field(False, description="Whether the output head shares the input embeddings.")
    qkv_bias: bool = field(False, description="Whether q/k/v projections carry biases (Qwen2.5 does).")

    @model_validator(mode="after")
    def _shape(self) -> ArchitectureSpec:
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.active_experts > self.experts:
            raise ValueError(f"active_experts ({self.active_experts}) exceeds experts ({self.experts})")
        return self


class PlacementSpec(SpecModel):
    pool: Name = field(description="Node pool the engine runs on.")
    tensor_parallel: int = field(
        1, description="GPUs one replica spans (whole-GPU pools only; must divide the GPUs of a node).",
        unit="GPUs", ge=1, le=16,
    )
    mig_profile: str | None = field(
        None, description="MIG profile one replica runs in (MIG pools only), for example 1g.20gb."
    )


class ThroughputOverrideSpec(SpecModel):
    """Measured throughput of one replica, replacing the catalog estimate."""

    prefill_tokens_per_second: float = field(
        description="Prompt tokens one replica processes per second at full load.", unit="tokens/s", gt=0, le=1e9
    )
    decode_tokens_per_second: float = field(
        description="Output tokens one replica generates per second at full load.", unit="tokens/s", gt=0, le=1e9
    )


class AdapterSpec(SpecModel):
    """A LoRA adapter served by its base engine."""

    name: Name = field(description="Adapter name: the model name tenants request it by.")
    base_model: ModelName = field(description="Base model it was trained on; must be the engine's model.")
    base_revision: Revision = field(description="Revision of that base model; must be the engine's revision.")
    rank: int = field(description="LoRA rank r.", ge=1, le=256)
    target_modules: list[LoraModule] = field(
        description="Projections the adapter modifies (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).",
        min_length=1, max_length=7,
    )
    source: SourceUri = field(
        description="Where the adapter's files are: hf://org/repo@revision, s3://bucket/path, gs://bucket/path, "
        "pvc://claim/path, or local://path (the local stack's artifacts)."
    )
    tenant: Name = field(description="The tenant that owns the adapter; only it may be allowed to use it.")


class LoraSpec(SpecModel):
    max_loras: int | None = field(
        None, description="Adapters that can be in one batch (vLLM --max-loras); omit to let the planner "
        "choose what fits in gpu_memory_fraction.", unit="adapters", ge=1, le=1024,
    )
    gpu_memory_fraction: float = field(
        0.10, description="Share of the memory left after weights and reserve that adapter slots may take "
        "from the KV cache.", unit="fraction", gt=0, le=0.9,
    )
    cpu_cache_gib: float = field(
        16.0, description="Host memory each replica may use to keep adapters warm (sets --max-cpu-loras).",
        unit="GiB", gt=0, le=4096,
    )


class EngineSpec(SpecModel):
    """One model deployment (a vLLM Deployment with replicas)."""

    name: Name = field(description="Engine name: the model name tenants request and the Kubernetes name.")
    model: ModelName = field(
        description="Base model: a catalog name (llama-3.1-8b, llama-3.1-70b, llama-3.2-3b, qwen2.5-7b, "
        "qwen2.5-32b, qwen2.5-72b, mistral-7b, mixtral-8x7b, tenantry-tiny, tenantry-micro) or, with "
        "`architecture`, a name of your own.",
    )
    architecture: ArchitectureSpec | None = field(None, description="Shape of a model that is not in the catalog.")
    revision: Revision | None = field(
        None, description="Pinned revision of the weights; defaults to the catalog's pin. Required with `architecture`."
    )
    source: SourceUri | None = field(
        None, description="Where the weights are; defaults to the catalog's. Required with `architecture`."
    )
    weights: WeightDtype = field("bf16", description="Weight format: bf16, fp8, or int4-awq.")
    kv_cache_dtype: KvCacheDtype = field(
        "auto", description="KV cache format: auto (16-bit, as the activations) or fp8 (half the bytes)."
    )
    max_context: int | None = field(
        None, description="Longest sequence (prompt + output) served; defaults to the smaller of 8192 and "
        "the model's maximum.", unit="tokens", ge=16, le=10_000_000,
    )
    placement: PlacementSpec = field(description="Where replicas run: a pool, and a TP size or a MIG profile.")
    replicas: int = field(1, description="Identical replicas behind the engine's Service.", ge=1, le=256)
    gpu_memory_utilization: float = field(
        0.90, description="Share of each GPU's memory the engine may claim (vLLM --gpu-memory-utilization).",
        unit="fraction", gt=0.05, le=1.0,
    )
    runtime_reserve_fraction: float = field(
        0.10, description="Share of each GPU's memory the planner keeps inside that claim for activations, "
        "CUDA graphs and the runtime; the rest after weights is KV cache.", unit="fraction", ge=0, le=0.5,
    )
    max_num_seqs: int = field(
        256, description="Upper bound on sequences batched together; the planner lowers it to what the KV "
        "cache holds at the tenants' typical context.", unit="sequences", ge=1, le=4096,
    )
    throughput: ThroughputOverrideSpec | None = field(
        None, description="Measured throughput per replica, replacing the catalog's estimate."
    )
    lora: LoraSpec = field(default_factory=LoraSpec, description="LoRA serving limits.")
    adapters: list[AdapterSpec] = field(default_factory=list, description="LoRA adapters served on this base.")


# --- tenants ---------------------------------------------------------------------------------


class BudgetSpec(SpecModel):
    usd: float = field(description="Spend allowed per window, priced at the plan's per-token cost.", unit="USD", gt=0, le=1e9)
    window: str = field(
        "30d", description="Budget reset period: a number and s, m, h, d, w or mo (30d, 1mo, 12h).",
        pattern=WINDOW_PATTERN,
    )


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
    tpm: int = field(description="Tokens (prompt + output) per minute.", unit="tokens/min", ge=1, le=10_000_000_000)
    rpm: int = field(description="Requests per minute.", unit="requests/min", ge=1, le=100_000_000)
    max_concurrency: int = field(description="Requests in flight at once.", unit="requests", ge=1, le=1_000_000)
    budget: BudgetSpec = field(description="Spend limit and its window.")
    cache: CacheIsolationSpec = field(default_factory=CacheIsolationSpec, description="Prefix-cache isolation.")
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


class TiersSpec(SpecModel):
    """Coarse priority levels: interactive work first, batch last."""

    guaranteed: TierPolicySpec = field(default_factory=lambda: TierPolicySpec(priority=0), description="Guaranteed tier.")
    best_effort: TierPolicySpec = field(
        default_factory=lambda: TierPolicySpec(priority=10), alias="best-effort", description="Best-effort tier."
    )
    spot: TierPolicySpec = field(default_factory=lambda: TierPolicySpec(priority=100), description="Spot tier.")

    def policy(self, tier: Tier) -> TierPolicySpec:
        return {"guaranteed": self.guaranteed, "best-effort": self.best_effort, "spot": self.spot}[tier]


# --- gateway ---------------------------------------------------------------------------------


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


# --- platform services ----------------------------------------------------------------------


class PostgresSpec(SpecModel):
    """LiteLLM's database: keys, teams, budgets and spend."""

    instances: int = field(2, description="PostgreSQL instances (one primary, the rest streaming replicas).", ge=1, le=9)
    storage_gib: int = field(20, description="Volume of each instance.", unit="GiB", ge=1, le=100_000)
    backup_destination: str | None = field(
        None, description="Object store for base backups and WAL archives (s3://bucket/path or gs://bucket/path); "
        "omit and the plan warns that nothing is backed up.",
        pattern=OBJECT_STORE_PATTERN,
    )
    backup_schedule: str = field(
        "0 0 3 * * *", description="When base backups run: six-field cron with seconds (CloudNativePG's format).",
        pattern=SIX_FIELD_CRON_PATTERN,
    )
    backup_retention_days: int = field(14, description="How long backups are kept.", unit="days", ge=1, le=3650)


class PlatformSpec(SpecModel):
    """Where and how the shared services run on Kubernetes."""

    namespace: Name = field("tenantry", description="Namespace of the gateway, engines, PostgreSQL and Redis.")
    storage_class: Name | None = field(None, description="StorageClass for volumes; omit for the cluster default.")
    postgres: PostgresSpec = field(default_factory=PostgresSpec, description="LiteLLM's PostgreSQL.")


# --- the whole spec --------------------------------------------------------------------------


class Spec(SpecModel):
    """stacks/<stack>.yaml"""

    description: str = field("", description="What this stack is for.", max_length=2000)
    cluster: ClusterSpec = field(description="The cluster and its node pools.")
    engines: list[EngineSpec] = field(description="Model deployments.", min_length=1)
    tenants: list[TenantSpec] = field(description="Tenants and their contracts.", min_length=1)
    tiers: TiersSpec = field(default_factory=TiersSpec, description="Priority and request caps per tier.")
    gateway: GatewaySpec = field(default_factory=GatewaySpec, description="The LiteLLM gateway.")
    platform: PlatformSpec = field(default_factory=PlatformSpec, description="Shared services on Kubernetes.")
