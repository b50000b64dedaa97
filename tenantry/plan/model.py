"""The Plan: every number tenantry decides, decided once.

Immutable; configs/, deploy/, manifests/, local/ and gate/ read it and never
recompute. `Plan.to_dict()` is what `tenantry plan --json` prints (its keys
are documented in docs/platform.md). Bytes are bytes, prices are USD, rates are per
second or per minute as the key says.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from tenantry.catalog.throughput import SizeClass
from tenantry.findings import Finding
from tenantry.plan.autoscaling import AutoscalingPlan
from tenantry.plan.routing import KvRoutingPlan
from tenantry.spec.fields import BucketScheme, CloudIdentityProvider, KubeletServingCerts, ModelCacheAccessMode
from tenantry.spec.schema import ClusterEnvironment, GpuSoftwareSource, MetricsApiSource
from tenantry.spec.schema import BudgetMode, CacheIsolationMode, IsolationLevel, KvCacheDtype, LoraModule, Tier
from tenantry.spec.schema import TrafficProfile, WeightDtype

PlacementKind = Literal["gpus", "mig", "cpu"]
"""Whole GPUs (tensor_parallel of them), one MIG slice, or the local stack's CPU."""
MigStrategy = Literal["none", "mixed"]
"""The GPU Operator's MIG strategy: mixed as soon as one pool is carved into slices."""
ThroughputSource = Literal["catalog", "spec"]


@dataclass(frozen=True, kw_only=True)
class MigSlices:
    profile: str
    available: int
    used: int


@dataclass(frozen=True, kw_only=True)
class PoolPlan:
    name: str
    gpu: str
    nodes: int
    gpus_per_node: int
    gpu_hour_price_usd: float
    mig_layout: tuple[str, ...] | None
    mig_config: str | None
    """Name of the mig-parted configuration the GPU Operator applies to the pool's nodes."""
    gpus: int
    gpus_used: int
    mig_slices: tuple[MigSlices, ...]
    node_label: str
    """Value of the tenantry.io/pool node label (and taint) engines select."""
    node_names: tuple[str, ...] | None
    """Nodes tenantry labels and taints; None when they come prepared."""
    dedicated_to: str | None = None
    """The tenant whose engines alone run here (isolation dedicated-node), on its nodes' tenantry.io/dedicated-to."""


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """One GPU (or MIG slice) of one replica."""

    device_bytes: int
    claimed_bytes: int
    """device_bytes x gpu_memory_utilization: what vLLM takes."""
    weight_bytes: int
    """This GPU's share of the weights (divided by tensor parallelism)."""
    reserve_bytes: int
    """Activations, CUDA graphs and runtime (runtime_reserve_fraction x device)."""
    lora_bytes: int
    """max_loras adapter slots at max_lora_rank."""
    kv_bytes: int
    """What is left for the KV cache (never below 0)."""


@dataclass(frozen=True, kw_only=True)
class KvPlan:
    bytes_per_token: int
    """2 x layers x KV heads x head dim x KV dtype bytes, the whole model."""
    bytes_per_token_per_gpu: int
    """The same on one GPU once KV heads are split by tensor parallelism."""
    block_size: int
    """Tokens per KV block (vLLM --block-size)."""
    blocks_per_replica: int
    """Whole blocks vLLM makes of memory.kv_bytes (its num_gpu_blocks)."""
    tokens_per_replica: int
    """blocks_per_replica x block_size: the KV cache size vLLM reports."""
    max_context: int
    typical_context: int
    """Concurrency-weighted prompt + output of the tenants routed here."""
    sequences_at_max_context: int
    sequences_at_typical_context: int
    max_num_seqs: int
    """vLLM --max-num-seqs: min(spec bound, sequences at typical context)."""


@dataclass(frozen=True, kw_only=True)
class Reservation:
    tenant: str
    slots: int


@dataclass(frozen=True, kw_only=True)
class SlotPlan:
    capacity: int
    """max_num_seqs x replicas: sequences the engine runs at once."""
    reserved: tuple[Reservation, ...]
    """Guaranteed tenants' slots, from their contracted concurrency."""
    reserved_total: int
    shared: int
    """capacity - reserved_total: best-effort shares these; spot uses them only while idle."""
    best_effort_demand: int
    spot_demand: int
    best_effort_max: int | None = None
    """Most best-effort sequences at once on the engine (tiers.best-effort.max_engine_slots); None: up to `shared`."""
    spot_max: int | None = None
    """Most spot sequences at once on the engine (tiers.spot.max_engine_slots); None: up to `shared`."""


@dataclass(frozen=True, kw_only=True)
class AdapterPlan:
    name: str
    tenant: str
    rank: int
    target_modules: tuple[LoraModule, ...]
    source: str
    bytes: int
    """Adapter weights in bf16 (host cache and storage)."""


@dataclass(frozen=True, kw_only=True)
class LoraPlan:
    enabled: bool
    max_lora_rank: int
    max_loras: int
    max_cpu_loras: int
    slot_bytes_per_gpu: int
    """One adapter slot on one GPU: every LoRA-capable projection at max_lora_rank."""
    adapters: tuple[AdapterPlan, ...]


@dataclass(frozen=True, kw_only=True)
class TokenPlan:
    throughput_source: ThroughputSource
    prefill_size_class: SizeClass
    decode_size_class: SizeClass
    prefill_tokens_per_second: float
    """One replica."""
    decode_tokens_per_second: float
    """One replica."""
    input_token_fraction: float
    """Share of the tenants' tokens that are prompt tokens (TPM-weighted)."""
    sustainable_tpm: int
    """All replicas, at the tenants' mix of prompt and output tokens."""
    demand_tpm: int
    guaranteed_tpm: int
    overcommit_ratio: float
    usd_per_hour: float
    """GPU cost of all replicas."""
    usd_per_1k_input_tokens: float
    usd_per_1k_output_tokens: float


@dataclass(frozen=True, kw_only=True)
class PodPlan:
    """What one engine replica's pod asks of its node besides GPUs."""

    cpu: float
    memory_bytes: int
    """Host memory: runtime, weight loading, the warm adapter cache."""
    shm_bytes: int
    """/dev/shm for the tensor-parallel workers (NCCL)."""
    download_bytes: int
    """The checkpoint fetched from the source: the bf16 one when vLLM quantises it while loading."""
    model_cache_bytes: int
    """The weights cache claim of the engine's model revision, filled once and mounted read-only by every replica."""
    adapter_store_bytes: int
    """The adapters cache claim, filled once per set of adapters and mounted read-only."""
    startup_seconds: int
    """How long the startup probe waits: starting vLLM and reading the checkpoint from the cache claim."""
    populate_seconds: int
    """Deadline of each Job that fills a cache claim: fetching the checkpoint and the adapters."""


@dataclass(frozen=True, kw_only=True)
class EnginePlan:
    name: str
    model: str
    revision: str
    source: str
    weights: WeightDtype
    quantize_on_load: bool
    """True when vLLM quantises the catalog's bf16 checkpoint while loading it
    (fp8 without a quantised `source`); the bf16 weights must then fit first."""
    gated: bool
    """`source` is a gated Hub repository: fetching it needs a Hub token (Pulumi config tenantry:hfToken)."""
    kv_cache_dtype: KvCacheDtype
    pool: str
    gpu: str
    placement: PlacementKind
    tensor_parallel: int
    mig_profile: str | None
    replicas: int
    gpu_resource: str | None
    """Extended resource each replica requests (nvidia.com/gpu, nvidia.com/mig-<profile>), None on CPU."""
    gpu_resource_count: int
    gpu_memory_utilization: float
    memory: MemoryPlan
    kv: KvPlan
    slots: SlotPlan
    lora: LoraPlan
    tokens: TokenPlan
    pod: PodPlan
    tenants: tuple[str, ...]
    """Tenants with traffic on this engine (directly or through its adapters)."""
    dedicated_to: str | None = None  # the one tenant it serves (isolation mig or dedicated-*); None: shared
    dedicated_nodes: bool = False
    """Its pool runs only dedicated_to's engines (isolation dedicated-node): its pods select that tenant's nodes."""
    autoscaling: AutoscalingPlan | None = None
    """Replica bounds under KEDA (tenantry/plan/autoscaling.py); None: `replicas`, fixed."""
    pipeline_parallel: int = 1
    """Nodes (pods) one replica spans, a pipeline stage of tensor_parallel GPUs on each: above 1, a
    LeaderWorkerSet of one leader and pipeline_parallel - 1 workers per replica."""
    stage_layers: tuple[int, ...] = ()
    """The model's layers on each pipeline stage, as vLLM splits them (tenantry/plan/memory.py)."""
    routing: KvRoutingPlan | None = None
    """How the gateway reaches the replicas (tenantry/plan/routing.py): None, through the engine's Service."""

    @property
    def most_replicas(self) -> int:
        """The replicas the pool must have room for: the autoscaler's ceiling, or the fixed count."""
        return self.autoscaling.max_replicas if self.autoscaling else self.replicas


@dataclass(frozen=True, kw_only=True)
class TrafficPlan:
    target: str
    engine: str
    adapter: str | None
    share: float
    profile: TrafficProfile
    tpm: int
    concurrency: int


@dataclass(frozen=True, kw_only=True)
class TenantPlan:
    name: str
    tier: Tier
    priority: int
    namespace: str
    models: tuple[str, ...]
    adapters: tuple[str, ...]
    overload_fallback: tuple[str, ...]  # its models, in order, to serve it when its engine's capacity would refuse it
    fallback_models: tuple[str, ...]
    """Engines the gateway may fall back to from the tenant's models; the
    tenant's key must be allowed them or LiteLLM skips the fallback."""
    tpm: int
    rpm: int
    max_concurrency: int
    budget_usd: float
    budget_window: str
    budget_alert_at: tuple[float, ...]
    """Shares of the budget at which TenantBudgetSpent fires: info, warning, critical in that order."""
    budget_mode: BudgetMode
    """chargeback: the gateway refuses at the budget; showback: it records and alerts, refusing only a runaway."""
    gateway_max_budget_usd: float  # the team's max_budget at the gateway: the budget, or SHOWBACK_RUNAWAY_FACTOR x it
    cache_isolation: CacheIsolationMode
    cache_salt: str | None
    isolation: IsolationLevel  # what its requests share, checked in tenantry/plan/isolation.py
    ttft_p95_ms: float
    itl_p95_ms: float
    max_error_rate: float
    typical_prompt_tokens: int
    typical_output_tokens: int
    contract_requests_per_second: float
    """What the contract allows: its RPM, or its TPM at its typical request (prompt
    and output), whichever binds first. The gate's loads are shares of it."""
    max_prompt_tokens: int | None
    max_output_tokens: int | None
    reserved_slots: int
    traffic: tuple[TrafficPlan, ...]
    quota_cpu: float
    quota_memory_bytes: int
    quota_pods: int
    quota_gpu_resources: tuple[str, ...]
    """GPU resources the namespace may request none of: whole GPUs and every MIG profile the pools' GPUs can be
    cut into (tenants reach models through the gateway only)."""


@dataclass(frozen=True, kw_only=True)
class FallbackPlan:
    model: str
    to: tuple[str, ...]
    adapters: tuple[str, ...] = ()
    """The engine's adapters that fall back with it (served by the fallback's base model)."""


@dataclass(frozen=True, kw_only=True)
class GatewayPlan:
    replicas: int
    fallbacks: tuple[FallbackPlan, ...]
    tier_priorities: tuple[tuple[Tier, int], ...]
    shed_spot_at_kv_usage: float
    shed_best_effort_at_kv_usage: float
    shed_spot_at_waiting: int
    shed_best_effort_at_waiting: int
    metrics_max_age_seconds: float
    engine_scrape_interval_seconds: int
    """How often Prometheus scrapes each engine: at most half of `metrics_max_age_seconds`,
    so the sample admission reads on Kubernetes is young enough with a scrape to spare."""
    wait_at_concurrency_limit_seconds: float
    spot_pause_after_others_seconds: float
    max_replicas: int
    """Ceiling of the gateway's autoscaler (its floor is `replicas`)."""
    max_request_bytes: int
    """The largest request body the gateway reads: 32 bytes for each token of the longest context
    of any engine (JSON-escaped text runs to about 12 bytes a token at worst), plus 64 KiB for the
    rest of the request; larger is a 413 before it is read (docs/decisions.md: The gateway's front door)."""
    request_read_seconds: float
    """How long the gateway waits for a request's body to arrive in full: the largest body at 64 KiB/s, at
    least 10 s; a client that trickles its body longer gets a 408 and holds the gateway no longer."""
    repeated_chunk_limit: int
    """LiteLLM ends a stream with a 500 after this many identical chunks in a row: one more than the longest
    context of any engine, so never (docs/decisions.md: The gateway does not cut a repeating stream)."""
    spend_write_seconds: int
    """How often each gateway replica writes the spend it counted in memory to PostgreSQL
    (LiteLLM's `proxy_batch_write_at`): what a replica killed mid-run can take with it, and
    how soon a budget's spend is in the database."""


@dataclass(frozen=True, kw_only=True)
class CloudIdentityPlan:
    """Who pods that read or write object storage act as (docs/decisions.md: Bucket readers act as one declared identity)."""

    provider: CloudIdentityProvider
    aws_role_arn: str | None
    gcp_service_account: str | None
    credentials_secret: str | None
    bucket_schemes: tuple[BucketScheme, ...]
    """The object stores the stack reaches (s3, gs): static credentials are wired for these only."""


@dataclass(frozen=True, kw_only=True)
class PlatformPlan:
    namespace: str
    storage_class: str | None
    postgres_instances: int
    postgres_storage_bytes: int
    postgres_backup_destination: str | None
    postgres_backup_schedule: str
    postgres_backup_longest_gap_seconds: int
    """The longest wait between two base backups the schedule starts: a last backup older than this (and the time
    one takes) is a backup missed."""
    postgres_backup_retention_days: int
    cloud_identity: CloudIdentityPlan | None
    runbook_base_url: str
    """Alerts link <this>/<AlertName>.md."""
    model_cache_access_mode: ModelCacheAccessMode
    """Access mode of the claims engines' weights and adapters are cached in."""
    model_cache_storage_class: str | None
    """StorageClass of those claims (None: the cluster's default)."""


@dataclass(frozen=True, kw_only=True)
class GpuOperatorPlan:
    """The GPU Operator's settings that depend on where the cluster runs
    (docs/decisions.md: GPU Operator settings follow the environment)."""

    driver: GpuSoftwareSource
    """operator: its driver container (driver.enabled); preinstalled: the node image's driver."""
    container_toolkit: GpuSoftwareSource
    mig_reboot: bool
    """The MIG manager's WITH_REBOOT: it may reboot a node whose MIG mode change needs one."""
    driver_install_dir: str
    """hostPaths.driverInstallDir: where the operator's components find the driver."""
    toolkit_install_dir: str
    runtime_class: str
    """operator.runtimeClass: the nodes' NVIDIA runtime handler."""
    toolkit_runtime_config_from_file: bool
    """The toolkit reads containerd's config from its file (RUNTIME_CONFIG_SOURCE=file)."""
    critical_pods_quota: int | None
    """Pods the operator's namespace may run at system-node-critical or system-cluster-critical
    priority, as a ResourceQuota (GKE admits such pods outside kube-system only under one); None: no quota."""


@dataclass(frozen=True, kw_only=True)
class ClusterPlan:
    environment: ClusterEnvironment
    gpu_operator: GpuOperatorPlan
    metrics_api: MetricsApiSource
    """install: tenantry installs metrics-server; present: the cluster serves metrics.k8s.io already."""
    kubelet_serving_certs: KubeletServingCerts
    """cluster-ca: metrics-server verifies the kubelets' certificates; self-signed: it runs with --kubelet-insecure-tls
    (tenantry/deploy/metrics_api.py)."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    stack: str
    description: str
    kubernetes_version: str
    mig_strategy: MigStrategy
    cluster: ClusterPlan
    pools: tuple[PoolPlan, ...]
    engines: tuple[EnginePlan, ...]
    tenants: tuple[TenantPlan, ...]
    gateway: GatewayPlan
    platform: PlatformPlan
    refusals: tuple[Finding, ...]
    warnings: tuple[Finding, ...]

    @property
    def fits(self) -> bool:
        return not self.refusals

    def engine(self, name: str) -> EnginePlan:
        return next(e for e in self.engines if e.name == name)

    def tenant(self, name: str) -> TenantPlan:
        return next(t for t in self.tenants if t.name == name)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fits"] = self.fits
        return data
