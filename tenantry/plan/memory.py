"""GPU memory of one replica: weights, reserve, KV cache and the sequences it holds.

The arithmetic first (pure functions), then the engine's MemoryPlan and KvPlan
with the refusals that name the field to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenantry.catalog.gpus import GpuType, MigProfile
from tenantry.catalog.models import Architecture
from tenantry.plan.model import KvPlan, LoraPlan, MemoryPlan, PlacementKind
from tenantry.plan.notes import EngineNotes
from tenantry.spec.schema import EngineSpec, KvCacheDtype, WeightDtype
from tenantry.units import human_bytes as gib

# Bytes per weight. int4-AWQ stores 4-bit weights plus, per group of 128, a
# 16-bit scale and a 4-bit zero point: (128 x 4 + 16 + 4) / 128 / 8 bytes.
WEIGHT_BYTES: dict[WeightDtype, float] = {"bf16": 2.0, "fp8": 1.0, "int4-awq": (128 * 4 + 16 + 4) / 128 / 8}
KV_BYTES: dict[KvCacheDtype, int] = {"auto": 2, "fp8": 1}


def weight_bytes(arch: Architecture, weights: WeightDtype) -> int:
    """All weights of the model. Quantised checkpoints (fp8, AWQ) keep the
    embeddings and the output head in 16 bits, so only the rest shrinks.
    Every MoE expert counts: all of them stay resident."""
    if weights == "bf16":
        return arch.total_parameters * 2
    # An explicit architecture may understate its total; never count negative weights.
    quantised = max(0, arch.total_parameters - arch.embedding_parameters)
    return math.ceil(quantised * WEIGHT_BYTES[weights]) + arch.embedding_parameters * 2


def pipeline_stages(layers: int, pipeline_parallel: int) -> tuple[int, ...]:
    """The layers of each pipeline stage as vLLM splits them (get_pp_indices in vllm/distributed/utils.py,
    v0.32.0): an equal share each, and the remainder one apiece to the stages before the last, from the
    second-to-last back (the last holds the output head and the final norm)."""
    stages = [layers // pipeline_parallel] * pipeline_parallel
    for i in range(2, layers % pipeline_parallel + 2):
        stages[-i] += 1
    return tuple(stages)


def stage_weight_bytes(arch: Architecture, weights: WeightDtype, stages: tuple[int, ...]) -> tuple[int, ...]:
    """The weights each pipeline stage holds: its layers' share of the decoder, the input embeddings on the
    first and the output head on the last (16-bit, as weight_bytes keeps them; a head tied to the embeddings
    is a copy of its own once they sit on different stages). One stage holds weight_bytes."""
    if len(stages) == 1:
        return (weight_bytes(arch, weights),)
    table = arch.vocab_size * arch.hidden_size * 2
    per_layer = (weight_bytes(arch, weights) - arch.embedding_parameters * 2) / arch.layers
    last = len(stages) - 1
    return tuple(math.ceil(per_layer * n + table * ((i == 0) + (i == last))) for i, n in enumerate(stages))


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Keys and values (2) for every layer, KV head and head dimension."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def kv_heads_per_gpu(kv_heads: int, tensor_parallel: int) -> int:
    """vLLM splits KV heads across the TP group, replicating them when the
    group is larger than the number of heads (each GPU then holds one)."""
    return max(1, kv_heads // tensor_parallel)


def kv_budget_bytes(device_bytes: int, utilisation: float, weight_bytes_per_gpu: int, reserve_bytes: int) -> int:
    """What vLLM leaves for the KV cache on one GPU: its claim minus weights and reserve."""
    return max(0, int(device_bytes * utilisation) - weight_bytes_per_gpu - reserve_bytes)


def kv_block_size(placement: PlacementKind) -> int:
    """Tokens per KV block, passed to vLLM as --block-size so no attention backend picks another:
    vLLM's CPU attention wants a multiple of 32, CUDA's default is 16
    (docs/decisions.md: The engine's KV cache is the Plan's)."""
    return 32 if placement == "cpu" else 16


def kv_blocks(kv_bytes: int, block_size: int, bytes_per_token_per_gpu: int) -> int:
    """Blocks vLLM makes of the KV bytes it is given: whole blocks of every layer's keys and
    values for block_size tokens, the remainder unused (vLLM's num_gpu_blocks)."""
    return kv_bytes // (block_size * bytes_per_token_per_gpu)


def sequences_in_blocks(blocks: int, block_size: int, tokens_per_sequence: int) -> int:
    """Sequences of this length the blocks hold, each taking whole blocks as vLLM allocates them."""
    return blocks // math.ceil(tokens_per_sequence / block_size) if tokens_per_sequence > 0 else 0


@dataclass(frozen=True, kw_only=True)
class GpuBudget:
    """One GPU (or MIG slice) of one replica before adapter slots and KV cache share what is free."""

    device_bytes: int
    claimed_bytes: int
    weights_total_bytes: int
    """All weights of the model, every GPU of the replica together."""
    weight_bytes_per_gpu: int
    reserve_bytes: int
    free_bytes: int
    """Claimed minus weights and reserve: adapter slots and the KV cache share it."""
    quantize_on_load: bool
    download_bytes: int
    """The checkpoint the engine downloads and reads: bf16 when quantised on load."""
    weights_fit: bool
    """The weights (and, when quantised on load, the bf16 checkpoint) fit beside the reserve."""


def plan_gpu_budget(
    engine: EngineSpec, arch: Architecture, gpu: GpuType, mig: MigProfile | None, stages: tuple[int, ...],
    notes: EngineNotes,
) -> GpuBudget:
    """`stages`: the layers of each pipeline stage (pipeline_stages; one stage on one node)."""
    tp, pp = engine.placement.tensor_parallel, len(stages)
    device = mig.memory_bytes if mig else gpu.memory_bytes
    claimed = int(device * engine.gpu_memory_utilization)
    weights_total = weight_bytes(arch, engine.weights)
    # The stage holding the most weights (a table of embeddings besides its layers) sets every GPU's share.
    weights_per_gpu = math.ceil(max(stage_weight_bytes(arch, engine.weights, stages)) / tp)
    reserve = int(device * engine.runtime_reserve_fraction)
    quantize_on_load = engine.weights != "bf16" and engine.source is None
    download = weight_bytes(arch, "bf16") if quantize_on_load else weights_total
    loading_per_gpu = math.ceil(max(stage_weight_bytes(arch, "bf16" if quantize_on_load else engine.weights,
                                                       stages)) / tp)
    where = f"a {mig.name} slice of an {gpu.name}" if mig else f"an {gpu.name}"
    if weights_per_gpu + reserve <= claimed < loading_per_gpu + reserve:
        notes.refuse(
            "weights",
            f"vLLM quantises the catalog's bf16 checkpoint to {engine.weights} while loading it, so the "
            f"{gib(loading_per_gpu)} of bf16 weights per GPU must fit first, but {where} gives the engine "
            f"{gib(claimed)}; give a pre-quantised checkpoint as source, or a larger tensor_parallel",
        )
    elif weights_per_gpu + reserve > claimed:
        over = f"tensor_parallel {tp}" + (f" x pipeline_parallel {pp}, its largest stage" if pp > 1 else "")
        split = f" ({gib(weights_total)} over {over})" if tp * pp > 1 else ""
        notes.refuse(
            "placement",
            f"{engine.model} {engine.weights} weights need {gib(weights_per_gpu)} per GPU{split} plus "
            f"{gib(reserve)} of runtime reserve, but {where} gives the engine {gib(claimed)} "
            f"(gpu_memory_utilization {engine.gpu_memory_utilization}); use a larger "
            + ("slice or whole GPUs" if mig else "tensor_parallel (or pipeline_parallel across nodes), quantised "
               "weights or a larger GPU"),
        )
    return GpuBudget(
        device_bytes=device,
        claimed_bytes=claimed,
        weights_total_bytes=weights_total,
        weight_bytes_per_gpu=weights_per_gpu,
        reserve_bytes=reserve,
        free_bytes=kv_budget_bytes(device, engine.gpu_memory_utilization, weights_per_gpu, reserve),
        quantize_on_load=quantize_on_load,
        download_bytes=download,
        weights_fit=max(weights_per_gpu, loading_per_gpu) + reserve <= claimed,
    )


def plan_memory(budget: GpuBudget, lora: LoraPlan) -> MemoryPlan:
    """Adapter slots come out of the same free memory as the KV cache."""
    lora_bytes = lora.max_loras * lora.slot_bytes_per_gpu
    return MemoryPlan(
        device_bytes=budget.device_bytes,
        claimed_bytes=budget.claimed_bytes,
        weight_bytes=budget.weight_bytes_per_gpu,
        reserve_bytes=budget.reserve_bytes,
        lora_bytes=lora_bytes,
        kv_bytes=max(0, budget.free_bytes - lora_bytes),
    )


def plan_kv(
    engine: EngineSpec,
    arch: Architecture,
    memory: MemoryPlan,
    *,
    max_context: int,
    typical_context: int,
    block_size: int,
    weights_fit: bool,
    stage_layers: int,
    notes: EngineNotes,
) -> KvPlan:
    """vLLM is given exactly memory.kv_bytes (--kv-cache-memory-bytes), so the tokens and
    sequences here are the blocks it makes of them (docs/decisions.md: The engine's KV cache is the Plan's)."""
    tp = engine.placement.tensor_parallel
    dtype_bytes = KV_BYTES[engine.kv_cache_dtype]
    # A pipeline stage keeps the keys and values of its own layers (`stage_layers`, the largest stage's): its
    # GPUs fill first, and vLLM makes every stage the same number of blocks.
    per_token_gpu = kv_bytes_per_token(stage_layers, kv_heads_per_gpu(arch.kv_heads, tp), arch.head_dim, dtype_bytes)
    blocks = kv_blocks(memory.kv_bytes, block_size, per_token_gpu)
    kv_tokens = blocks * block_size
    at_max = sequences_in_blocks(blocks, block_size, max_context)
    at_typical = sequences_in_blocks(blocks, block_size, typical_context)
    if at_max < 1 and weights_fit:
        notes.refuse(
            "max_context",
            f"after weights, reserve and adapter slots the KV cache holds {kv_tokens:,} tokens per replica, "
            f"less than one {max_context:,}-token sequence; lower max_context, use kv_cache_dtype fp8 or more "
            f"memory",
        )
    return KvPlan(
        bytes_per_token=kv_bytes_per_token(arch.layers, arch.kv_heads, arch.head_dim, dtype_bytes),
        bytes_per_token_per_gpu=per_token_gpu,
        block_size=block_size,
        blocks_per_replica=blocks,
        tokens_per_replica=kv_tokens,
        max_context=max_context,
        typical_context=typical_context,
        sequences_at_max_context=at_max,
        sequences_at_typical_context=at_typical,
        max_num_seqs=max(1, min(engine.max_num_seqs, at_typical)),
    )
