"""What one engine replica's pod asks of its node besides GPUs (docs/decisions.md: Engine pod sizing)."""

from __future__ import annotations

import math

from tenantry.plan.model import LoraPlan, PlacementKind, PodPlan

STARTUP_BASE_SECONDS = 300
"""Starting vLLM before any weight is read."""
STARTUP_SECONDS_PER_GIB = 6
"""Downloading and loading one GiB of the checkpoint."""


def _gib_ceil(n: float) -> int:
    return math.ceil(n / 2**30) * 2**30


def plan_pod(tensor_parallel: int, placement: PlacementKind, download_bytes: int, lora: LoraPlan) -> PodPlan:
    """vLLM keeps a CPU worker per GPU busy (tokenising, scheduling, detokenising), loads weights
    through host memory shard by shard, and keeps max_cpu_loras adapters in host memory.
    The volume and the start-up time follow the checkpoint as downloaded (bf16 when vLLM
    quantises it while loading), not the weights as they sit on the GPU."""
    gpus = tensor_parallel
    warm_adapters = sum(sorted((a.bytes for a in lora.adapters), reverse=True)[: lora.max_cpu_loras])
    return PodPlan(
        cpu=2.0 if placement == "cpu" else float(max(4, 4 * gpus)),
        memory_bytes=_gib_ceil((8 if placement == "cpu" else 16 * gpus) * 2**30 + warm_adapters),
        # NCCL between the tensor-parallel workers goes through /dev/shm.
        shm_bytes=(4 * gpus if gpus > 1 else 1) * 2**30,
        download_bytes=download_bytes,
        # The checkpoint plus the tokenizer, config and headroom.
        model_cache_bytes=_gib_ceil(download_bytes * 1.15 + 2**30),
        adapter_store_bytes=_gib_ceil(sum(a.bytes for a in lora.adapters) * 1.2 + 2**28),
        startup_seconds=STARTUP_BASE_SECONDS + STARTUP_SECONDS_PER_GIB * math.ceil(download_bytes / 2**30),
    )
