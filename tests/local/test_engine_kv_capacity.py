"""Every local engine runs with the KV cache the Plan states: the Plan's KV
tokens per replica are vLLM's own block count times its block size, read from
the engine itself (docs/decisions.md: The engine's KV cache is the Plan's)."""

from __future__ import annotations

import math
import re

import httpx
import pytest

from tenantry.stacks import plan_stack
from tests.local.conftest import SPEC

ENGINES = [engine.name for engine in plan_stack(SPEC).engines]
INFO_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')
CAPACITY_LINE = re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for "
                           r"(?P<length>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x")


def cache_config_info(metrics: str) -> dict[str, str]:
    """The labels of vLLM's `vllm:cache_config_info` gauge (its CacheConfig, as strings)."""
    found = INFO_LINE.search(metrics)
    assert found, "the engine's /metrics has no vllm:cache_config_info"
    return dict(LABEL.findall(found["labels"]))


def test_every_engine_of_the_local_stack_is_checked():
    assert len(ENGINES) >= 2, ENGINES


@pytest.mark.parametrize("name", ENGINES)
def test_the_engine_holds_the_kv_tokens_the_plan_states(stack, name):
    engine = stack.up.plan.engine(name)
    info = cache_config_info(httpx.get(f"{stack.engine_url(name)}/metrics", timeout=10).text)
    blocks, block_size = int(info["num_gpu_blocks"]), int(info["block_size"])
    assert blocks * block_size == engine.kv.tokens_per_replica, info
    assert (blocks, block_size) == (engine.kv.blocks_per_replica, engine.kv.block_size)


@pytest.mark.parametrize("name", ENGINES)
def test_the_engine_logs_the_plans_capacity_and_concurrency_at_max_context(stack, name):
    engine = stack.up.plan.engine(name)
    logged = CAPACITY_LINE.findall(stack.engine_log(name))
    assert logged, f"engine {name} logged no KV cache size"
    tokens, length, concurrency = logged[-1]  # the last start, should the engine have been restarted
    assert int(tokens.replace(",", "")) == engine.kv.tokens_per_replica
    assert int(length.replace(",", "")) == engine.kv.max_context
    assert math.floor(float(concurrency)) == engine.kv.sequences_at_max_context
