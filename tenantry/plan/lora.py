"""LoRA arithmetic: adapter sizes, slot sizes, and the limits vLLM is started with."""

from __future__ import annotations

from collections.abc import Iterable

from tenantry.catalog.models import LORA_MODULES, Architecture
from tenantry.plan.memory import kv_heads_per_gpu

LORA_DTYPE_BYTES = 2  # adapters are served in bf16, whatever the base's format
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM's LoRAConfig accepts for --max-lora-rank."""

# vLLM's tensor-parallel LoRA layers: column-parallel projections keep A whole
# and split B's output; row-parallel ones split A's input and keep B whole.
_ROW_PARALLEL = {"o_proj", "down_proj"}


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
