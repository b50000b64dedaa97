"""GPU memory arithmetic: weights, KV cache, sequences that fit. Pure functions."""

from __future__ import annotations

import math

from tenantry.catalog.models import Architecture

# Bytes per weight. int4-AWQ stores 4-bit weights plus, per group of 128, a
# 16-bit scale and a 4-bit zero point: (128 x 4 + 16 + 4) / 128 / 8 bytes.
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4-awq": (128 * 4 + 16 + 4) / 128 / 8}
KV_BYTES = {"auto": 2, "fp8": 1}


def weight_bytes(arch: Architecture, weights: str) -> int:
    """All weights of the model. Quantised checkpoints (fp8, AWQ) keep the
    embeddings and the output head in 16 bits, so only the rest shrinks.
    Every MoE expert counts: all of them stay resident."""
    if weights == "bf16":
        return arch.total_parameters * 2
    # An explicit architecture may understate its total; never count negative weights.
    quantised = max(0, arch.total_parameters - arch.embedding_parameters)
    return math.ceil(quantised * WEIGHT_BYTES[weights]) + arch.embedding_parameters * 2


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


def sequences_that_fit(kv_tokens: int, tokens_per_sequence: int) -> int:
    return kv_tokens // tokens_per_sequence if tokens_per_sequence > 0 else 0
