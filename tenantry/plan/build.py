"""plan(spec) -> Plan: every number decided once, every refusal listed.

Pure: no files, no network, no clocks. The spec has already passed
validation (tenantry.spec), so every name here resolves; what can still go
wrong is capacity, and each such problem becomes a refusal with the path of
the field to change.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from tenantry.catalog.gpus import GPU_TYPES, GpuType, MigProfile
from tenantry.catalog.models import Architecture, estimate_parameters
from tenantry.catalog.throughput import size_class
from tenantry.findings import Finding
from tenantry.plan import lora as lora_math
from tenantry.plan.memory import (
    KV_BYTES,
    kv_budget_bytes,
    kv_bytes_per_token,
    kv_heads_per_gpu,
    sequences_that_fit,
    weight_bytes,
)
from tenantry.plan.model import (
    AdapterPlan,
    EnginePlan,
    FallbackPlan,
    GatewayPlan,
    KvPlan,
    LoraPlan,
    MemoryPlan,
    MigSlices,
    Plan,
    PlatformPlan,
    PodPlan,
    PoolPlan,
    TenantPlan,
    TokenPlan,
    TrafficPlan,
)
from tenantry.plan.placement import mig_config_name, mig_slices_available, pack_tp_groups
from tenantry.plan.slots import Demand, concurrency_share, plan_slots
from tenantry.plan.tokens import mig_gpu_share, replica_throughput, sustainable_tpm, usd_per_1k_tokens
from tenantry.spec.resolve import engine_max_context, resolve_model
from tenantry.spec.schema import TIERS, EngineSpec, Spec, TenantSpec
from tenantry.units import count
from tenantry.units import human_bytes as gib

OVERCOMMIT_WARNING = 1.2
"""Above this, tenants' TPM limits assume they rarely peak together (seed 004: 10-20 % is healthy)."""
RANK_SPREAD_WARNING = 8
"""Co-batching rank 8 with rank 128 costs the low-rank requests up to +84 % p95 TTFT (seed 004)."""


@dataclass
class _Notes:
    refusals: list[Finding]
    warnings: list[Finding]

    def refuse(self, path: str, message: str) -> None:
        self.refusals.append(Finding(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(Finding(path, message))


@dataclass(frozen=True)
class _Route:
    """One tenant's traffic to one target."""

    tenant: TenantSpec
    target: str
    engine: str
    adapter: str | None
    share: float
    profile: str


def plan(spec: Spec, stack: str) -> Plan:
    notes = _Notes([], [])
    routes = _routes(spec)
    by_engine: dict[str, list[_Route]] = defaultdict(list)
    for route in routes:
        by_engine[route.engine].append(route)
    fallback_targets = {t for f in spec.gateway.fallbacks for t in f.to}

    engines = tuple(
        _plan_engine(i, engine, spec, by_engine[engine.name], engine.name in fallback_targets, notes)
        for i, engine in enumerate(spec.engines)
    )
    pools = tuple(_plan_pool(i, spec, engines, notes) for i in range(len(spec.cluster.node_pools)))
    routes_by_tenant: dict[str, list[_Route]] = defaultdict(list)
    for route in routes:
        routes_by_tenant[route.tenant.name].append(route)
    reserved: dict[str, int] = defaultdict(int)
    for engine_plan in engines:
        for reservation in engine_plan.slots.reserved:
            reserved[reservation.tenant] += reservation.slots
    tenants = tuple(
        _plan_tenant(spec, tenant, routes_by_tenant[tenant.name], reserved[tenant.name]) for tenant in spec.tenants
    )
    if spec.gateway.replicas < 2:
        notes.warn("gateway.replicas", "one gateway replica: every request fails while it restarts")
    if spec.platform.postgres.backup_destination is None:
        notes.warn("platform.postgres.backup_destination", "not set: keys, budgets and spend are not backed up")

    return Plan(
        stack=stack,
        description=spec.description,
        kubernetes_version=spec.cluster.kubernetes_version,
        mig_strategy="mixed" if any(p.mig_layout for p in spec.cluster.node_pools) else "none",
        pools=pools,
        engines=engines,
        tenants=tenants,
        gateway=_plan_gateway(spec),
        platform=_plan_platform(spec),
        refusals=tuple(notes.refusals),
        warnings=tuple(notes.warnings),
    )


# --- traffic ---------------------------------------------------------------------------------


def _routes(spec: Spec) -> list[_Route]:
    adapter_engine = {a.name: e.name for e in spec.engines for a in e.adapters}
    routes = []
    for tenant in spec.tenants:
        if tenant.traffic is not None:
            shares = [(s.target, s.share, s.profile) for s in tenant.traffic]
        else:
            allowed = list(dict.fromkeys(tenant.models + tenant.adapters))
            shares = [(target, 1 / len(allowed), "chat") for target in allowed]
        for target, share, profile in shares:
            adapter = target if target in adapter_engine else None
            engine = adapter_engine[target] if adapter else target
            routes.append(_Route(tenant, target, engine, adapter, share, profile))
    return routes


# --- engines ---------------------------------------------------------------------------------


def _plan_engine(
    index: int, engine: EngineSpec, spec: Spec, routes: list[_Route], is_fallback: bool, notes: _Notes
) -> EnginePlan:
    path = f"engines[{index}]"
    who = f"engine {engine.name}"
    resolved = resolve_model(engine)
    assert resolved is not None, "validated by tenantry.spec"
    arch = resolved.architecture
    pool = next(p for p in spec.cluster.node_pools if p.name == engine.placement.pool)
    gpu = GPU_TYPES[pool.gpu]
    mig = gpu.mig_profile(engine.placement.mig_profile) if engine.placement.mig_profile else None
    tp = engine.placement.tensor_parallel
    placement = "mig" if mig else ("cpu" if gpu.name == "CPU" else "gpus")
    max_context = engine_max_context(engine, arch)

    if engine.architecture is not None:
        implied = estimate_parameters(arch)
        if abs(implied - arch.total_parameters) > 0.1 * implied:
            notes.warn(
                f"{path}.architecture.total_parameters",
                f"{arch.total_parameters:,} parameters, but the shape implies about {implied:,}; weight memory "
                f"follows the stated total ({who})",
            )

    # --- memory on one GPU (or slice)
    device = mig.memory_bytes if mig else gpu.memory_bytes
    claimed = int(device * engine.gpu_memory_utilization)
    weights_total = weight_bytes(arch, engine.weights)
    weights_per_gpu = math.ceil(weights_total / tp)
    reserve = int(device * engine.runtime_reserve_fraction)
    free = kv_budget_bytes(device, engine.gpu_memory_utilization, weights_per_gpu, reserve)
    where = f"a {mig.name} slice of an {gpu.name}" if mig else f"an {gpu.name}"
    quantize_on_load = engine.weights != "bf16" and engine.source is None
    loading_per_gpu = math.ceil(weight_bytes(arch, "bf16") / tp) if quantize_on_load else weights_per_gpu
    weights_fit = max(weights_per_gpu, loading_per_gpu) + reserve <= claimed
    if weights_per_gpu + reserve <= claimed < loading_per_gpu + reserve:
        notes.refuse(
            f"{path}.weights",
            f"vLLM quantises the catalog's bf16 checkpoint to {engine.weights} while loading it, so the "
            f"{gib(loading_per_gpu)} of bf16 weights per GPU must fit first, but {where} gives the engine "
            f"{gib(claimed)}; give a pre-quantised checkpoint as source, or a larger tensor_parallel ({who})",
        )
    elif weights_per_gpu + reserve > claimed:
        split = f" ({gib(weights_total)} over tensor_parallel {tp})" if tp > 1 else ""
        notes.refuse(
            f"{path}.placement",
            f"{engine.model} {engine.weights} weights need {gib(weights_per_gpu)} per GPU{split} plus "
            f"{gib(reserve)} of runtime reserve, but {where} gives the engine {gib(claimed)} "
            f"(gpu_memory_utilization {engine.gpu_memory_utilization}); use a larger "
            + ("slice or whole GPUs" if mig else "tensor_parallel, quantised weights or a larger GPU")
            + f" ({who})",
        )

    # --- LoRA slots come out of the same pool as the KV cache
    lora_plan, lora_bytes = _plan_lora(path, who, engine, arch, tp, free, notes)
    kv_bytes = max(0, free - lora_bytes)

    # --- KV cache and sequences
    dtype_bytes = KV_BYTES[engine.kv_cache_dtype]
    per_token = kv_bytes_per_token(arch.layers, arch.kv_heads, arch.head_dim, dtype_bytes)
    per_token_gpu = kv_bytes_per_token(arch.layers, kv_heads_per_gpu(arch.kv_heads, tp), arch.head_dim, dtype_bytes)
    kv_tokens = kv_bytes // per_token_gpu
    demands = _demands(routes)
    weight_sum = sum(d.concurrency for d in demands)
    if weight_sum:
        context_by_tenant = {r.tenant.name: r.tenant.typical.prompt_tokens + r.tenant.typical.output_tokens for r in routes}
        typical = round(sum(d.concurrency * context_by_tenant[d.tenant] for d in demands) / weight_sum)
    else:
        typical = max_context
    at_max = sequences_that_fit(kv_tokens, max_context)
    at_typical = sequences_that_fit(kv_tokens, typical)
    max_num_seqs = max(1, min(engine.max_num_seqs, at_typical))
    if at_max < 1 and weights_fit:
        notes.refuse(
            f"{path}.max_context",
            f"after weights, reserve and adapter slots the KV cache holds {kv_tokens:,} tokens per replica, "
            f"less than one {max_context:,}-token sequence; lower max_context, use kv_cache_dtype fp8 or more "
            f"memory ({who})",
        )
    kv = KvPlan(
        bytes_per_token=per_token, bytes_per_token_per_gpu=per_token_gpu, tokens_per_replica=kv_tokens,
        max_context=max_context, typical_context=typical, sequences_at_max_context=at_max,
        sequences_at_typical_context=at_typical, max_num_seqs=max_num_seqs,
    )

    # --- slots
    slots = plan_slots(max_num_seqs * engine.replicas, demands)
    # Slot figures mean nothing for an engine whose weights or one sequence do
    # not fit: the refusal above already says what to change.
    memory_fits = weights_fit and at_max >= 1
    if memory_fits and slots.reserved_total > slots.capacity:
        owners = ", ".join(f"{r.tenant} {r.slots}" for r in slots.reserved)
        notes.refuse(
            path,
            f"guaranteed tenants reserve {slots.reserved_total} concurrent sequences ({owners}) but the engine "
            f"runs {slots.capacity} ({max_num_seqs} per replica x {engine.replicas}, at a typical context of "
            f"{typical:,} tokens); add replicas or lower their max_concurrency ({who})",
        )
    elif memory_fits and slots.best_effort_demand > slots.shared:
        notes.warn(
            path,
            f"best-effort tenants may have {slots.best_effort_demand} requests in flight but only "
            f"{slots.shared} slots are not reserved; the rest queue or get 429s ({who})",
        )
    if memory_fits and slots.spot_demand and slots.shared == 0 and slots.reserved_total <= slots.capacity:
        notes.warn(path, f"no unreserved slots: spot tenants will never be admitted ({who})")
    if not routes and not is_fallback:
        notes.warn(path, f"no tenant sends traffic here and it is no fallback target ({who})")

    tokens = _plan_tokens(path, who, engine, arch, gpu, mig, pool.gpu_hour_price_usd, routes, notes)
    if mig:
        resource, resource_count = f"nvidia.com/mig-{mig.name}", 1
    elif placement == "cpu":
        resource, resource_count = None, 0
    else:
        resource, resource_count = "nvidia.com/gpu", tp

    return EnginePlan(
        name=engine.name,
        model=resolved.name,
        revision=resolved.revision,
        source=resolved.source,
        weights=engine.weights,
        quantize_on_load=quantize_on_load,
        kv_cache_dtype=engine.kv_cache_dtype,
        pool=pool.name,
        gpu=gpu.name,
        placement=placement,
        tensor_parallel=tp,
        mig_profile=mig.name if mig else None,
        replicas=engine.replicas,
        gpu_resource=resource,
        gpu_resource_count=resource_count,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        memory=MemoryPlan(
            device_bytes=device, claimed_bytes=claimed, weight_bytes=weights_per_gpu, reserve_bytes=reserve,
            lora_bytes=lora_bytes, kv_bytes=kv_bytes,
        ),
        kv=kv,
        slots=slots,
        lora=lora_plan,
        tokens=tokens,
        pod=_plan_pod(engine, weights_total, lora_plan, placement),
        tenants=tuple(dict.fromkeys(r.tenant.name for r in routes)),
    )


def _gib_ceil(n: float) -> int:
    return math.ceil(n / 2**30) * 2**30


def _plan_pod(engine: EngineSpec, weights_total: int, lora_plan: LoraPlan, placement: str) -> PodPlan:
    """Host resources of one replica. vLLM keeps a CPU worker per GPU busy
    (tokenising, scheduling, detokenising), loads weights through host memory
    shard by shard, and keeps max_cpu_loras adapters in host memory."""
    gpus = engine.placement.tensor_parallel
    warm_adapters = sum(sorted((a.bytes for a in lora_plan.adapters), reverse=True)[: lora_plan.max_cpu_loras])
    return PodPlan(
        cpu=2.0 if placement == "cpu" else float(max(4, 4 * gpus)),
        memory_bytes=_gib_ceil((8 if placement == "cpu" else 16 * gpus) * 2**30 + warm_adapters),
        # NCCL between the TP workers goes through /dev/shm; vLLM suggests several GiB.
        shm_bytes=(4 * gpus if gpus > 1 else 1) * 2**30,
        model_cache_bytes=_gib_ceil(weights_total * 1.15 + 2**30),  # + tokenizer, config, headroom
        adapter_store_bytes=_gib_ceil(sum(a.bytes for a in lora_plan.adapters) * 1.2 + 2**28),
        # Five minutes to start, plus downloading at ~200 MB/s (6 s per GiB) and loading.
        startup_seconds=300 + 6 * math.ceil(weights_total / 2**30),
    )


def _demands(routes: list[_Route]) -> list[Demand]:
    share_by_tenant: dict[str, float] = defaultdict(float)
    tenants: dict[str, TenantSpec] = {}
    for route in routes:
        share_by_tenant[route.tenant.name] += route.share
        tenants[route.tenant.name] = route.tenant
    return [
        Demand(name, tenants[name].tier, concurrency_share(tenants[name].max_concurrency, share))
        for name, share in share_by_tenant.items()
    ]


def _plan_lora(
    path: str, who: str, engine: EngineSpec, arch: Architecture, tp: int, free: int, notes: _Notes
) -> tuple[LoraPlan, int]:
    adapters = tuple(
        AdapterPlan(
            name=a.name, tenant=a.tenant, rank=a.rank, target_modules=tuple(a.target_modules), source=a.source,
            bytes=lora_math.adapter_bytes(arch, a.rank, a.target_modules),
        )
        for a in engine.adapters
    )
    if not adapters:
        return LoraPlan(
            enabled=False, max_lora_rank=0, max_loras=0, max_cpu_loras=0, slot_bytes_per_gpu=0, adapters=()
        ), 0

    ranks = [a.rank for a in adapters]
    rank = lora_math.max_lora_rank(ranks)
    if rank > max(ranks):
        notes.warn(
            f"{path}.adapters",
            f"the highest adapter rank is {max(ranks)} but vLLM only takes --max-lora-rank {rank}; every slot "
            f"pays for rank {rank} ({who})",
        )
    if max(ranks) >= RANK_SPREAD_WARNING * min(ranks):
        notes.warn(
            f"{path}.adapters",
            f"adapter ranks range from {min(ranks)} to {max(ranks)}: low-rank requests batched with high-rank ones "
            f"lose latency; keep ranks within a narrow range ({who})",
        )
    slot = lora_math.slot_bytes_per_gpu(arch, rank, tp)
    budget = int(max(free, 0) * engine.lora.gpu_memory_fraction)
    if engine.lora.max_loras is not None:
        max_loras = engine.lora.max_loras
        if max_loras * slot > max(free, 0):
            notes.refuse(
                f"{path}.lora.max_loras",
                f"{max_loras} adapter slots at rank {rank} need {gib(max_loras * slot)} per GPU but only "
                f"{gib(max(free, 0))} is left after weights and reserve ({who})",
            )
    else:
        # A batch of max_num_seqs sequences cannot use more adapters than that.
        max_loras = min(len(adapters), engine.max_num_seqs, lora_math.adapters_that_fit(budget, slot))
        if max_loras < 1 and free > 0:
            notes.refuse(
                f"{path}.lora.gpu_memory_fraction",
                f"one adapter slot at rank {rank} needs {gib(slot)} per GPU but gpu_memory_fraction "
                f"{engine.lora.gpu_memory_fraction} sets aside {gib(budget)}; raise it or lower the ranks ({who})",
            )
        max_loras = max(max_loras, 1)

    largest = max(a.bytes for a in adapters)
    cpu_fit = lora_math.adapters_that_fit(int(engine.lora.cpu_cache_gib * 2**30), largest)
    if cpu_fit < max_loras:
        notes.refuse(
            f"{path}.lora.cpu_cache_gib",
            f"the host cache holds {cpu_fit} adapters of {gib(largest)}, fewer than the {max_loras} GPU slots "
            f"(vLLM needs max_cpu_loras >= max_loras) ({who})",
        )
    max_cpu_loras = max(max_loras, min(len(adapters), cpu_fit))
    if len(adapters) > max_cpu_loras:
        notes.warn(
            f"{path}.lora.cpu_cache_gib",
            f"{len(adapters)} adapters but {max_cpu_loras} stay warm in host memory; the rest load from the "
            f"adapter store on first use ({who})",
        )
    lora_plan = LoraPlan(
        enabled=True, max_lora_rank=rank, max_loras=max_loras, max_cpu_loras=max_cpu_loras, slot_bytes_per_gpu=slot,
        adapters=adapters,
    )
    return lora_plan, max_loras * slot


def _plan_tokens(
    path: str,
    who: str,
    engine: EngineSpec,
    arch: Architecture,
    gpu: GpuType,
    mig: MigProfile | None,
    gpu_hour_price: float,
    routes: list[_Route],
    notes: _Notes,
) -> TokenPlan:
    tp = engine.placement.tensor_parallel
    prefill_class = size_class(arch.active_parameters)
    decode_class = size_class(arch.total_parameters)
    if engine.throughput is not None:
        source = "spec"
        prefill = engine.throughput.prefill_tokens_per_second
        decode = engine.throughput.decode_tokens_per_second
    else:
        source = "catalog"
        prefill, decode = replica_throughput(gpu, prefill_class, decode_class, engine.weights, tp, mig)

    tpm_by_route = [(r, r.tenant.tpm * r.share) for r in routes]
    demand = sum(t for _, t in tpm_by_route)
    guaranteed = sum(t for r, t in tpm_by_route if r.tenant.tier == "guaranteed")
    if demand:
        input_fraction = sum(
            t * r.tenant.typical.prompt_tokens / (r.tenant.typical.prompt_tokens + r.tenant.typical.output_tokens)
            for r, t in tpm_by_route
        ) / demand
    else:
        input_fraction = 0.8  # the spec's default typical request: 1024 prompt, 256 output tokens

    if prefill <= 0 or decode <= 0:
        notes.refuse(
            f"{path}.throughput",
            f"the catalog has no throughput estimate for a {decode_class} model on {gpu.name}; measure one "
            f"replica and give prefill_tokens_per_second and decode_tokens_per_second ({who})",
        )
        return TokenPlan(
            throughput_source=source, prefill_size_class=prefill_class, decode_size_class=decode_class,
            prefill_tokens_per_second=0, decode_tokens_per_second=0, input_token_fraction=input_fraction,
            sustainable_tpm=0, demand_tpm=round(demand), guaranteed_tpm=round(guaranteed), overcommit_ratio=0.0,
            usd_per_hour=0.0, usd_per_1k_input_tokens=0.0, usd_per_1k_output_tokens=0.0,
        )

    capacity = sustainable_tpm(prefill, decode, input_fraction, engine.replicas)
    ratio = demand / capacity
    if guaranteed > capacity:
        notes.refuse(
            path,
            f"guaranteed tenants alone are allowed {guaranteed:,.0f} tokens/min but the engine sustains about "
            f"{capacity:,} at their prompt/output mix; add replicas or lower their tpm ({who})",
        )
    elif ratio > OVERCOMMIT_WARNING:
        notes.warn(
            path,
            f"tenants may send {demand:,.0f} tokens/min against about {capacity:,} sustainable "
            f"({ratio:.2f}x); that holds only while they do not all peak together ({who})",
        )

    gpus = mig_gpu_share(mig) if mig else tp
    return TokenPlan(
        throughput_source=source,
        prefill_size_class=prefill_class,
        decode_size_class=decode_class,
        prefill_tokens_per_second=round(prefill, 1),
        decode_tokens_per_second=round(decode, 1),
        input_token_fraction=round(input_fraction, 4),
        sustainable_tpm=capacity,
        demand_tpm=round(demand),
        guaranteed_tpm=round(guaranteed),
        overcommit_ratio=round(ratio, 3),
        usd_per_hour=round(gpu_hour_price * gpus * engine.replicas, 4),
        usd_per_1k_input_tokens=usd_per_1k_tokens(gpu_hour_price, gpus, prefill),
        usd_per_1k_output_tokens=usd_per_1k_tokens(gpu_hour_price, gpus, decode),
    )


# --- pools -----------------------------------------------------------------------------------


def _plan_pool(index: int, spec: Spec, engines: tuple[EnginePlan, ...], notes: _Notes) -> PoolPlan:
    pool = spec.cluster.node_pools[index]
    path = f"cluster.node_pools[{index}]"
    mine = [e for e in engines if e.pool == pool.name]
    gpus = pool.nodes * pool.gpus_per_node
    layout = tuple(pool.mig_layout) if pool.mig_layout else None
    slices: tuple[MigSlices, ...] = ()
    if layout:
        available = mig_slices_available(layout, gpus)
        used: dict[str, int] = defaultdict(int)
        for e in mine:
            used[e.mig_profile or ""] += e.replicas
        slices = tuple(MigSlices(profile=p, available=available[p], used=used.get(p, 0)) for p in sorted(available))
        for s in slices:
            if s.used > s.available:
                notes.refuse(
                    path,
                    f"engines need {s.used} {s.profile} slices but pool {pool.name} carves {s.available} "
                    f"({count(pool.nodes, 'node')} x {count(pool.gpus_per_node, 'GPU')} x "
                    f"{layout.count(s.profile)} per GPU)",
                )
        gpus_used = gpus if mine else 0
    else:
        groups = [e.tensor_parallel for e in mine for _ in range(e.replicas)]
        gpus_used = sum(groups)
        if not pack_tp_groups(groups, pool.nodes, pool.gpus_per_node):
            notes.refuse(
                path,
                f"engines need {gpus_used} GPUs in tensor-parallel groups of "
                f"{', '.join(str(g) for g in sorted(groups, reverse=True))} but pool {pool.name} has "
                f"{count(pool.nodes, 'node')} x {count(pool.gpus_per_node, 'GPU')}",
            )
    return PoolPlan(
        name=pool.name,
        gpu=pool.gpu,
        nodes=pool.nodes,
        gpus_per_node=pool.gpus_per_node,
        gpu_hour_price_usd=pool.gpu_hour_price_usd,
        mig_layout=layout,
        mig_config=mig_config_name(layout) if layout else None,
        gpus=gpus,
        gpus_used=gpus_used,
        mig_slices=slices,
        node_label=pool.name,
        node_names=tuple(pool.node_names) if pool.node_names else None,
    )


# --- tenants and gateway ---------------------------------------------------------------------


def _plan_tenant(spec: Spec, tenant: TenantSpec, mine: list[_Route], reserved: int) -> TenantPlan:
    policy = spec.tiers.policy(tenant.tier)
    traffic = tuple(
        TrafficPlan(
            target=r.target, engine=r.engine, adapter=r.adapter, share=r.share, profile=r.profile,
            tpm=round(tenant.tpm * r.share), concurrency=concurrency_share(tenant.max_concurrency, r.share),
        )
        for r in mine
    )
    if tenant.cache.isolation == "own":
        salt: str | None = tenant.cache.salt or f"tenant-{tenant.name}"
    elif tenant.cache.isolation == "shared":
        salt = f"group-{tenant.cache.group}"
    else:
        salt = None
    return TenantPlan(
        name=tenant.name,
        tier=tenant.tier,
        priority=policy.priority,
        namespace=f"tenant-{tenant.name}",
        models=tuple(tenant.models),
        adapters=tuple(tenant.adapters),
        fallback_models=_fallback_closure(spec, tenant),
        tpm=tenant.tpm,
        rpm=tenant.rpm,
        max_concurrency=tenant.max_concurrency,
        budget_usd=tenant.budget.usd,
        budget_window=tenant.budget.window,
        cache_isolation=tenant.cache.isolation,
        cache_salt=salt,
        ttft_p95_ms=tenant.slo.ttft_p95_ms,
        itl_p95_ms=tenant.slo.itl_p95_ms,
        max_error_rate=tenant.slo.max_error_rate,
        typical_prompt_tokens=tenant.typical.prompt_tokens,
        typical_output_tokens=tenant.typical.output_tokens,
        contract_requests_per_second=min(
            tenant.rpm, tenant.tpm / (tenant.typical.prompt_tokens + tenant.typical.output_tokens)) / 60,
        max_prompt_tokens=policy.max_prompt_tokens,
        max_output_tokens=policy.max_output_tokens,
        reserved_slots=reserved,
        traffic=traffic,
        quota_cpu=tenant.namespace_quota.cpu,
        quota_memory_bytes=int(tenant.namespace_quota.memory_gib * 2**30),
        quota_pods=tenant.namespace_quota.pods,
    )


def _fallback_closure(spec: Spec, tenant: TenantSpec) -> tuple[str, ...]:
    """Every engine reachable through fallbacks from the engines the tenant
    calls (its adapters' base engines included), that it is not allowed already."""
    to = {f.model: f.to for f in spec.gateway.fallbacks}
    base_of = {a.name: e.name for e in spec.engines for a in e.adapters}
    start = set(tenant.models) | {base_of[a] for a in tenant.adapters if a in base_of}
    seen: list[str] = []
    frontier = sorted(start)
    while frontier:
        engine = frontier.pop(0)
        for target in to.get(engine, []):
            if target not in start and target not in seen:
                seen.append(target)
                frontier.append(target)
    return tuple(seen)


def _plan_gateway(spec: Spec) -> GatewayPlan:
    admission = spec.gateway.admission
    adapters_of = {e.name: tuple(a.name for a in e.adapters) for e in spec.engines}
    return GatewayPlan(
        replicas=spec.gateway.replicas,
        fallbacks=tuple(FallbackPlan(model=f.model, to=tuple(f.to),
                                       adapters=adapters_of.get(f.model, ()) if f.include_adapters else ())
                        for f in spec.gateway.fallbacks),
        tier_priorities=tuple((tier, spec.tiers.policy(tier).priority) for tier in TIERS),
        shed_spot_at_kv_usage=admission.shed_spot_at_kv_usage,
        shed_best_effort_at_kv_usage=admission.shed_best_effort_at_kv_usage,
        shed_spot_at_waiting=admission.shed_spot_at_waiting,
        shed_best_effort_at_waiting=admission.shed_best_effort_at_waiting,
        metrics_max_age_seconds=admission.metrics_max_age_seconds,
        wait_at_concurrency_limit_seconds=admission.wait_at_concurrency_limit_ms / 1000,
        spot_pause_after_others_seconds=admission.spot_pause_after_others_seconds,
        # One LiteLLM worker handles ~40-55 requests/s (notes); room to triple.
        max_replicas=max(3 * spec.gateway.replicas, 2),
    )


def _plan_platform(spec: Spec) -> PlatformPlan:
    postgres = spec.platform.postgres
    return PlatformPlan(
        namespace=spec.platform.namespace,
        storage_class=spec.platform.storage_class,
        postgres_instances=postgres.instances,
        postgres_storage_bytes=postgres.storage_gib * 2**30,
        postgres_backup_destination=postgres.backup_destination,
        postgres_backup_schedule=postgres.backup_schedule,
        postgres_backup_retention_days=postgres.backup_retention_days,
    )
