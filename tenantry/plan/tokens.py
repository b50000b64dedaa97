"""Throughput, sustainable tokens per minute, and what a token costs."""

from __future__ import annotations

from tenantry.catalog.gpus import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, GpuType, MigProfile
from tenantry.catalog.throughput import (
    DECODE_DTYPE_SPEEDUP,
    PREFILL_DTYPE_SPEEDUP,
    THROUGHPUT_PER_GPU,
    SizeClass,
    tensor_parallel_efficiency,
)


def replica_throughput(
    gpu: GpuType,
    prefill_class: SizeClass,
    decode_class: SizeClass,
    weights: str,
    tensor_parallel: int,
    mig_profile: MigProfile | None,
) -> tuple[float, float]:
    """(prefill, decode) tokens/s of one replica from the catalog: the per-GPU
    figure times the GPUs of the replica and their TP efficiency, or, on a
    MIG slice, times its share of compute (prefill) and of memory (decode)."""
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
