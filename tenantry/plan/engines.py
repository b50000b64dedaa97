"""One engine's plan, composed from its parts in the order each needs the last: GPU memory
budget -> LoRA slots -> memory -> KV cache -> slots -> tokens -> pod."""

from __future__ import annotations

from tenantry.catalog.gpus import GPU_TYPES, WHOLE_GPU_RESOURCE, MigProfile, mig_resource
from tenantry.catalog.models import Architecture, estimate_parameters, is_gated
from tenantry.plan.autoscaling import plan_autoscaling
from tenantry.plan.lora import plan_lora
from tenantry.plan.memory import kv_block_size, pipeline_stages, plan_gpu_budget, plan_kv, plan_memory
from tenantry.plan.model import EnginePlan, PlacementKind
from tenantry.plan.notes import EngineNotes
from tenantry.plan.pod import plan_pod
from tenantry.plan.routes import Route, demands, typical_context
from tenantry.plan.routing import plan_routing
from tenantry.plan.slots import plan_engine_slots
from tenantry.plan.tokens import plan_tokens
from tenantry.spec.resolve import engine_max_context, resolve_model
from tenantry.spec.schema import EngineSpec, Spec


def plan_engine(
    engine: EngineSpec, spec: Spec, routes: list[Route], is_fallback: bool, notes: EngineNotes
) -> EnginePlan:
    resolved = resolve_model(engine)
    assert resolved is not None, "validated by tenantry.spec"
    arch = resolved.architecture
    pool = next(p for p in spec.cluster.node_pools if p.name == engine.placement.pool)
    gpu = GPU_TYPES[pool.gpu]
    mig = gpu.mig_profile(engine.placement.mig_profile) if engine.placement.mig_profile else None
    placement: PlacementKind = "mig" if mig else ("cpu" if gpu.name == "CPU" else "gpus")
    max_context = engine_max_context(engine, arch)
    _warn_suspect_inputs(engine, arch, notes, unrouted=not routes and not is_fallback)
    stages = pipeline_stages(arch.layers, engine.placement.pipeline_parallel)
    budget = plan_gpu_budget(engine, arch, gpu, mig, stages, notes)
    guaranteed = frozenset(t.name for t in spec.tenants if t.tier == "guaranteed")
    lora = plan_lora(engine, arch, budget.free_bytes, guaranteed, notes)
    memory = plan_memory(budget, lora)
    engine_demands = demands(routes)
    typical = typical_context(routes, engine_demands, max_context)
    kv = plan_kv(
        engine, arch, memory, max_context=max_context, typical_context=typical, block_size=kv_block_size(placement),
        weights_fit=budget.weights_fit, stage_layers=max(stages), notes=notes,
    )
    caps = {tier: spec.tiers.policy(tier).max_engine_slots for tier in ("best-effort", "spot")}
    slots = plan_engine_slots(engine.replicas, kv, engine_demands, caps, notes=notes,
                              memory_fits=budget.weights_fit and kv.sequences_at_max_context >= 1)
    tokens = plan_tokens(engine, arch, gpu, mig, pool.gpu_hour_price_usd, routes, notes)
    resource, resource_count = _gpu_resource(placement, mig, tp := engine.placement.tensor_parallel)
    pod = plan_pod(tp, placement, budget.download_bytes, lora, pipeline_parallel=len(stages))
    return EnginePlan(
        name=engine.name,
        model=resolved.name,
        revision=resolved.revision,
        source=resolved.source,
        weights=engine.weights,
        quantize_on_load=budget.quantize_on_load,
        gated=is_gated(resolved.source),
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
        memory=memory,
        kv=kv,
        slots=slots,
        lora=lora,
        tokens=tokens,
        pod=pod,
        tenants=tuple(dict.fromkeys(r.tenant.name for r in routes)),
        autoscaling=plan_autoscaling(engine, placement == "cpu", pod.startup_seconds, notes),
        pipeline_parallel=len(stages),
        stage_layers=stages,
        routing=plan_routing(engine, spec, placement == "cpu", notes),
    )


def _warn_suspect_inputs(engine: EngineSpec, arch: Architecture, notes: EngineNotes, unrouted: bool) -> None:
    """An engine nobody sends to is probably a mistake; so is an explicit architecture whose stated total is far
    from what its shape implies (a typo)."""
    if unrouted:
        notes.warn(None, "no tenant sends traffic here and it is no fallback target")
    if engine.architecture is None:
        return
    implied = estimate_parameters(arch)
    if abs(implied - arch.total_parameters) > 0.1 * implied:
        notes.warn(
            "architecture.total_parameters",
            f"{arch.total_parameters:,} parameters, but the shape implies about {implied:,}; weight memory "
            f"follows the stated total",
        )


def _gpu_resource(placement: PlacementKind, mig: MigProfile | None, tensor_parallel: int) -> tuple[str | None, int]:
    """The extended resource each replica's pod (each stage's, across nodes) requests, and how many of it."""
    if mig:
        return mig_resource(mig.name), 1
    if placement == "cpu":
        return None, 0
    return WHOLE_GPU_RESOURCE, tensor_parallel
