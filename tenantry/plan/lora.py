"""LoRA: adapter sizes, slot sizes, and the limits vLLM is started with.

The arithmetic first (pure functions), then the engine's LoraPlan with the
refusals and warnings that name the field to change.
"""

from __future__ import annotations

from collections.abc import Iterable

from tenantry.catalog.models import LORA_MODULES, Architecture
from tenantry.plan.memory import kv_heads_per_gpu
from tenantry.plan.model import AdapterPlan, LoraPlan
from tenantry.plan.notes import EngineNotes
from tenantry.spec.schema import EngineSpec
from tenantry.units import human_bytes as gib

LORA_DTYPE_BYTES = 2  # adapters are served in bf16, whatever the base's format
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM's LoRAConfig accepts for --max-lora-rank."""

# vLLM's tensor-parallel LoRA layers: column-parallel projections keep A whole
# and split B's output; row-parallel ones split A's input and keep B whole.
_ROW_PARALLEL = {"o_proj", "down_proj"}

RANK_SPREAD_WARNING = 8
"""Ranks this many times apart in one engine get a warning: batched together, the low-rank requests lose
latency (docs/decisions.md: Narrow adapter rank spread)."""


def adapter_bytes(arch: Architecture, rank: int, target_modules: Iterable[str]) -> int:
    """Weights of one adapter: for each adapted projection in each layer,
    A (rank x in) plus B (out x rank), in bf16."""
    params = 0
    for module in set(target_modules):
        features_in, features_out = arch.module_shape(module)
        params += arch.module_copies(module) * rank * (features_in + features_out)
    return arch.layers * params * LORA_DTYPE_BYTES


def slot_bytes_per_gpu(arch: Architecture, max_rank: int, tensor_parallel: int) -> int:
    """One GPU's share of one adapter slot. vLLM preallocates every slot for
    every LoRA-capable projection at max_lora_rank, whatever the adapters
    target, so this is the price of raising max_loras by one."""
    kv_width = kv_heads_per_gpu(arch.kv_heads, tensor_parallel) * arch.head_dim
    params = 0
    for module in LORA_MODULES:
        features_in, features_out = arch.module_shape(module)
        if module in ("k_proj", "v_proj"):
            features_out = kv_width * tensor_parallel  # replicated heads are stored on every GPU
        if module in _ROW_PARALLEL:
            per_gpu = features_in // tensor_parallel + features_out
        else:
            per_gpu = features_in + features_out // tensor_parallel
        params += arch.module_copies(module) * max_rank * per_gpu
    return arch.layers * params * LORA_DTYPE_BYTES


def max_lora_rank(ranks: Iterable[int]) -> int:
    """The highest rank served, raised only as far as the next value vLLM accepts."""
    highest = max(ranks)
    return next(r for r in VLLM_MAX_LORA_RANKS if r >= highest)


def adapters_that_fit(budget_bytes: int, bytes_each: int) -> int:
    return budget_bytes // bytes_each if bytes_each > 0 else 0


def plan_lora(
    engine: EngineSpec, arch: Architecture, free_bytes: int, guaranteed: frozenset[str], notes: EngineNotes
) -> LoraPlan:
    """Adapter slots come out of `free_bytes` (one GPU's memory after weights and reserve),
    which the KV cache gets the rest of. `guaranteed` names the guaranteed tier's tenants."""
    adapters = tuple(
        AdapterPlan(
            name=a.name, tenant=a.tenant, rank=a.rank, target_modules=tuple(a.target_modules), source=a.source,
            bytes=adapter_bytes(arch, a.rank, a.target_modules),
        )
        for a in engine.adapters
    )
    if not adapters:
        return LoraPlan(enabled=False, max_lora_rank=0, max_loras=0, max_cpu_loras=0, slot_bytes_per_gpu=0, adapters=())
    rank = _served_rank([a.rank for a in adapters], notes)
    slot = slot_bytes_per_gpu(arch, rank, engine.placement.tensor_parallel)
    max_loras = _gpu_slots(engine, adapters=len(adapters), rank=rank, slot=slot, free_bytes=free_bytes, notes=notes)
    _warn_guaranteed_adapters_can_wait(engine, adapters, max_loras, guaranteed, notes)
    return LoraPlan(
        enabled=True,
        max_lora_rank=rank,
        max_loras=max_loras,
        max_cpu_loras=_host_slots(engine, adapters, max_loras, notes),
        slot_bytes_per_gpu=slot,
        adapters=adapters,
    )


def _served_rank(ranks: list[int], notes: EngineNotes) -> int:
    rank = max_lora_rank(ranks)
    if rank > max(ranks):
        notes.warn(
            "adapters",
            f"the highest adapter rank is {max(ranks)} but vLLM only takes --max-lora-rank {rank}; every slot "
            f"pays for rank {rank}",
        )
    if max(ranks) >= RANK_SPREAD_WARNING * min(ranks):
        notes.warn(
            "adapters",
            f"adapter ranks range from {min(ranks)} to {max(ranks)}: low-rank requests batched with high-rank ones "
            f"lose latency; keep ranks within a narrow range",
        )
    return rank


def _gpu_slots(
    engine: EngineSpec, *, adapters: int, rank: int, slot: int, free_bytes: int, notes: EngineNotes
) -> int:
    """--max-loras: the spec's, or as many as fit in the LoRA share of the free memory."""
    free = max(free_bytes, 0)
    if engine.lora.max_loras is not None:
        if engine.lora.max_loras * slot > free:
            notes.refuse(
                "lora.max_loras",
                f"{engine.lora.max_loras} adapter slots at rank {rank} need {gib(engine.lora.max_loras * slot)} per "
                f"GPU but only {gib(free)} is left after weights and reserve",
            )
        return engine.lora.max_loras
    budget = int(free * engine.lora.gpu_memory_fraction)
    # A batch of max_num_seqs sequences cannot use more adapters than that.
    max_loras = min(adapters, engine.max_num_seqs, adapters_that_fit(budget, slot))
    if max_loras < 1 and free_bytes > 0:
        notes.refuse(
            "lora.gpu_memory_fraction",
            f"one adapter slot at rank {rank} needs {gib(slot)} per GPU but gpu_memory_fraction "
            f"{engine.lora.gpu_memory_fraction} sets aside {gib(budget)}; raise it or lower the ranks",
        )
    return max(max_loras, 1)


def slots_so_no_adapter_waits(adapters: int, max_num_seqs: int) -> int:
    """Adapter slots at which an adapter never waits for a slot: one per adapter, but never more
    than a batch has sequences (a full batch makes everyone wait, in priority order)."""
    return min(adapters, max_num_seqs)


def _warn_guaranteed_adapters_can_wait(
    engine: EngineSpec, adapters: tuple[AdapterPlan, ...], max_loras: int, guaranteed: frozenset[str],
    notes: EngineNotes,
) -> None:
    """vLLM schedules a waiting request only if its adapter is already in the batch or a slot is
    free, and priority preempts for KV blocks, never for an adapter slot: while other adapters keep
    every slot busy, a guaranteed tenant's adapter waits, whatever its priority
    (docs/decisions.md: A guaranteed tenant's adapter should never wait for an adapter slot)."""
    needed = slots_so_no_adapter_waits(len(adapters), engine.max_num_seqs)
    owners = sorted({a.tenant for a in adapters if a.tenant in guaranteed})
    if not owners or max_loras >= needed:
        return
    notes.warn(
        "lora.max_loras",
        f"{max_loras} adapter slots for {len(adapters)} adapters: guaranteed tenant(s) {', '.join(owners)} can "
        f"wait behind other adapters for as long as they keep every slot busy (vLLM's priority does not preempt "
        f"for an adapter slot); {needed} slots, or their own engine, keep their SLO",
    )


def _host_slots(engine: EngineSpec, adapters: tuple[AdapterPlan, ...], max_loras: int, notes: EngineNotes) -> int:
    """--max-cpu-loras: every adapter the host cache holds, and never fewer than the GPU slots."""
    largest = max(a.bytes for a in adapters)
    cpu_fit = adapters_that_fit(int(engine.lora.cpu_cache_gib * 2**30), largest)
    if cpu_fit < max_loras:
        notes.refuse(
            "lora.cpu_cache_gib",
            f"the host cache holds {cpu_fit} adapters of {gib(largest)}, fewer than the {max_loras} GPU slots "
            f"(vLLM needs max_cpu_loras >= max_loras)",
        )
    max_cpu_loras = max(max_loras, min(len(adapters), cpu_fit))
    if len(adapters) > max_cpu_loras:
        notes.warn(
            "lora.cpu_cache_gib",
            f"{len(adapters)} adapters but {max_cpu_loras} stay warm in host memory; the rest load from the "
            f"adapter store on first use",
        )
    return max_cpu_loras
