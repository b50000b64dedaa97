"""Throughput, sustainable tokens per minute, and what a token costs.

The arithmetic first (pure functions), then the engine's TokenPlan with the
refusals and warnings that name the field to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.catalog.gpus import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, GpuType, MigProfile
from tenantry.catalog.models import Architecture
from tenantry.catalog.throughput import (
    DECODE_DTYPE_SPEEDUP,
    PREFILL_DTYPE_SPEEDUP,
    THROUGHPUT_PER_GPU,
    SizeClass,
    pipeline_parallel_efficiency,
    size_class,
    tensor_parallel_efficiency,
)
from tenantry.plan.model import ThroughputSource, TokenPlan
from tenantry.plan.notes import EngineNotes
from tenantry.plan.routes import Route
from tenantry.spec.schema import EngineSpec, WeightDtype

OVERCOMMIT_WARNING = 1.2
"""Above this ratio of allowed to sustainable tokens per minute, tenants' TPM limits hold only while they
rarely peak together (docs/decisions.md: Overcommit warning at 1.2)."""
DEFAULT_INPUT_FRACTION = 0.8
"""Prompt share of an engine nobody sends traffic to: the spec's default typical request (1024 prompt,
256 output tokens)."""


def replica_throughput(
    gpu: GpuType,
    prefill_class: SizeClass,
    decode_class: SizeClass,
    weights: WeightDtype,
    tensor_parallel: int,
    mig_profile: MigProfile | None,
    pipeline_parallel: int = 1,
) -> tuple[float, float]:
    """(prefill, decode) tokens/s of one replica from the catalog: the per-GPU
    figure times the GPUs of the replica and their TP (and pipeline) efficiency, or,
    on a MIG slice, times its share of compute (prefill) and of memory (decode)."""
    prefill = THROUGHPUT_PER_GPU[gpu.name][prefill_class][0] * PREFILL_DTYPE_SPEEDUP[weights]
    decode = THROUGHPUT_PER_GPU[gpu.name][decode_class][1] * DECODE_DTYPE_SPEEDUP[weights]
    if weights == "fp8" and not gpu.fp8_tensor_cores:
        prefill /= PREFILL_DTYPE_SPEEDUP["fp8"]  # weight-only fp8: no faster matmuls
    if mig_profile is not None:
        return (
            prefill * mig_profile.compute_slices / MIG_COMPUTE_SLICES,
            decode * mig_profile.memory_slices / MIG_MEMORY_SLICES,
        )
    scale = tensor_parallel * tensor_parallel_efficiency(tensor_parallel, gpu.interconnect)
    scale *= pipeline_parallel * pipeline_parallel_efficiency(pipeline_parallel)
    return prefill * scale, decode * scale


def sustainable_tpm(prefill_tps: float, decode_tps: float, input_fraction: float, replicas: int) -> int:
    """Tokens per minute the engine sustains for a mix with `input_fraction`
    prompt tokens: a prompt token costs 1/prefill seconds of the replica, an
    output token 1/decode."""
    seconds_per_token = input_fraction / prefill_tps + (1 - input_fraction) / decode_tps
    return int(60 * replicas / seconds_per_token)


def gpu_seconds_per_1k_tokens(gpus: float, tokens_per_second: float) -> float:
    return gpus / tokens_per_second * 1000


def usd_per_1k_tokens(gpu_hour_price: float, gpus: float, tokens_per_second: float) -> float:
    """GPU cost of 1,000 tokens at full sustained throughput: what the gateway
    charges, so that a tenant's spend is its share of the GPU bill."""
    return gpu_hour_price / 3600 * gpu_seconds_per_1k_tokens(gpus, tokens_per_second)


def mig_gpu_share(profile: MigProfile) -> float:
    """Share of a GPU a slice takes away from others: whichever of its compute
    and memory fractions is larger (a 3g.40gb blocks half the memory)."""
    return max(profile.compute_slices / MIG_COMPUTE_SLICES, profile.memory_slices / MIG_MEMORY_SLICES)


@dataclass(frozen=True, kw_only=True)
class _Throughput:
    source: ThroughputSource
    prefill_class: SizeClass
    decode_class: SizeClass
    prefill: float
    decode: float


@dataclass(frozen=True, kw_only=True)
class _TokenDemand:
    tpm: float
    guaranteed_tpm: float
    input_fraction: float


def plan_tokens(
    engine: EngineSpec,
    arch: Architecture,
    gpu: GpuType,
    mig: MigProfile | None,
    gpu_hour_price: float,
    routes: list[Route],
    notes: EngineNotes,
) -> TokenPlan:
    speed = _throughput(engine, arch, gpu, mig)
    demand = _token_demand(routes)
    if speed.prefill <= 0 or speed.decode <= 0:
        notes.refuse(
            "throughput",
            f"the catalog has no throughput estimate for a {speed.decode_class} model on {gpu.name}; measure one "
            f"replica and give prefill_tokens_per_second and decode_tokens_per_second",
        )
        return TokenPlan(
            throughput_source=speed.source, prefill_size_class=speed.prefill_class,
            decode_size_class=speed.decode_class, prefill_tokens_per_second=0, decode_tokens_per_second=0,
            input_token_fraction=demand.input_fraction, sustainable_tpm=0, demand_tpm=round(demand.tpm),
            guaranteed_tpm=round(demand.guaranteed_tpm), overcommit_ratio=0.0, usd_per_hour=0.0,
            usd_per_1k_input_tokens=0.0, usd_per_1k_output_tokens=0.0,
        )
    capacity = sustainable_tpm(speed.prefill, speed.decode, demand.input_fraction, engine.replicas)
    ratio = demand.tpm / capacity
    _check_demand(demand, capacity, ratio, notes)
    gpus = mig_gpu_share(mig) if mig else engine.placement.tensor_parallel * engine.placement.pipeline_parallel
    return TokenPlan(
        throughput_source=speed.source,
        prefill_size_class=speed.prefill_class,
        decode_size_class=speed.decode_class,
        prefill_tokens_per_second=round(speed.prefill, 1),
        decode_tokens_per_second=round(speed.decode, 1),
        input_token_fraction=round(demand.input_fraction, 4),
        sustainable_tpm=capacity,
        demand_tpm=round(demand.tpm),
        guaranteed_tpm=round(demand.guaranteed_tpm),
        overcommit_ratio=round(ratio, 3),
        usd_per_hour=round(gpu_hour_price * gpus * engine.replicas, 4),
        usd_per_1k_input_tokens=usd_per_1k_tokens(gpu_hour_price, gpus, speed.prefill),
        usd_per_1k_output_tokens=usd_per_1k_tokens(gpu_hour_price, gpus, speed.decode),
    )


def _throughput(engine: EngineSpec, arch: Architecture, gpu: GpuType, mig: MigProfile | None) -> _Throughput:
    """The spec's measured figures when given, else the catalog's estimate for the model's size class."""
    prefill_class = size_class(arch.active_parameters)
    decode_class = size_class(arch.total_parameters)
    if engine.throughput is not None:
        source: ThroughputSource = "spec"
        prefill = engine.throughput.prefill_tokens_per_second
        decode = engine.throughput.decode_tokens_per_second
    else:
        source = "catalog"
        prefill, decode = replica_throughput(
            gpu, prefill_class, decode_class, engine.weights, engine.placement.tensor_parallel, mig,
            engine.placement.pipeline_parallel,
        )
    return _Throughput(
        source=source, prefill_class=prefill_class, decode_class=decode_class, prefill=prefill, decode=decode
    )


def _token_demand(routes: list[Route]) -> _TokenDemand:
    """Tokens per minute the tenants routed here may send, and the prompt share of them (TPM-weighted)."""
    tpm_by_route = [(r, r.tenant.tpm * r.share) for r in routes]
    demand = sum(t for _, t in tpm_by_route)
    guaranteed = sum(t for r, t in tpm_by_route if r.tenant.tier == "guaranteed")
    if demand:
        input_fraction = sum(
            t * r.tenant.typical.prompt_tokens / (r.tenant.typical.prompt_tokens + r.tenant.typical.output_tokens)
            for r, t in tpm_by_route
        ) / demand
    else:
        input_fraction = DEFAULT_INPUT_FRACTION
    return _TokenDemand(tpm=demand, guaranteed_tpm=guaranteed, input_fraction=input_fraction)


def _check_demand(demand: _TokenDemand, capacity: int, ratio: float, notes: EngineNotes) -> None:
    if demand.guaranteed_tpm > capacity:
        notes.refuse(
            None,
            f"guaranteed tenants alone are allowed {demand.guaranteed_tpm:,.0f} tokens/min but the engine sustains "
            f"about {capacity:,} at their prompt/output mix; add replicas or lower their tpm",
        )
    elif ratio > OVERCOMMIT_WARNING:
        notes.warn(
            None,
            f"tenants may send {demand.tpm:,.0f} tokens/min against about {capacity:,} sustainable "
            f"({ratio:.2f}x); that holds only while they do not all peak together",
        )
