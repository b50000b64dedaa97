"""Engines whose replicas span nodes (placement.pipeline_parallel): the stages vLLM splits the layers
into, each GPU's weights and KV cache under TP x PP, and stacks/h100x16-405b.yaml, against figures
worked out by hand from Llama 3.1 405B's config.json (126 layers, hidden 16,384, 8 KV heads of 128,
vocabulary 128,256, 405,853,388,800 parameters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tenantry.catalog.models import CATALOG_MODELS
from tenantry.catalog.throughput import pipeline_parallel_efficiency
from tenantry.plan.memory import pipeline_stages, stage_weight_bytes
from tenantry.stacks import plan_stack, require_fit
from tests.unit.specs import chain as _chain
from tests.unit.specs import delete_field as _delete
from tests.unit.specs import set_field as _set
from tests.unit.test_invalid_specs import test_invalid_spec_is_refused_with_path_and_reason as _refused_at
from tests.unit.test_invalid_specs import test_spec_that_does_not_fit_is_refused_with_path_and_reason as _not_fitting_at

LLAMA_405B = CATALOG_MODELS["llama-3.1-405b"].architecture


@pytest.mark.parametrize(("layers", "stages", "expected"), [
    (126, 1, (126,)),
    (126, 2, (63, 63)),
    # 126 = 4 x 31 + 2: the two left over go to the stages before the last, from the second-to-last back.
    (126, 4, (31, 32, 32, 31)),
    (80, 3, (27, 27, 26)),
    (32, 32, (1,) * 32),
])
def test_stages_take_the_layers_as_vllm_splits_them(layers, stages, expected):
    assert pipeline_stages(layers, stages) == expected and sum(expected) == layers


def test_each_stage_holds_its_layers_and_one_table_of_embeddings():
    """bf16: 2 bytes a parameter. The embeddings are 128,256 x 16,384 = 2,101,346,304 parameters, and the
    output head as many again (untied): 4,202,692,608 bytes each. The 126 layers hold the rest:
    (405,853,388,800 - 4,202,692,608) x 2 = 803,301,392,384 bytes, 401,650,696,192 per 63 layers. The
    first stage adds the input table and the last the head: 405,853,388,800 bytes each, half the model."""
    assert stage_weight_bytes(LLAMA_405B, "bf16", (126,)) == (811_706_777_600,)
    assert stage_weight_bytes(LLAMA_405B, "bf16", (63, 63)) == (405_853_388_800, 405_853_388_800)
    # fp8 keeps the tables in 16 bits: the layers are 401,650,696,192 bytes in all, 200,825,348,096 per 63.
    assert stage_weight_bytes(LLAMA_405B, "fp8", (63, 63)) == (205_028_040_704, 205_028_040_704)
    # A middle stage holds no table: four stages of 31, 32, 32 and 31 layers of 6,375,407,876.06 bytes.
    four = stage_weight_bytes(LLAMA_405B, "bf16", (31, 32, 32, 31))
    assert four == (201_840_336_766, 204_013_052_035, 204_013_052_035, 201_840_336_766)


def test_the_405b_stack_plans_each_gpu_as_its_stage():
    """Two H100 nodes, TP 8 x PP 2: each GPU holds 405,853,388,800 / 8 = 50,731,673,600 bytes of weights,
    and keys and values of its stage's 63 layers for its one KV head (8 heads over TP 8) in fp8:
    2 x 63 x 1 x 128 x 1 = 16,128 bytes a token (the whole model: 258,048). Sixteen GPUs at $2.49."""
    plan = plan_stack("stacks/h100x16-405b.yaml")
    require_fit(plan)
    engine = plan.engine("llama-405b")
    assert (engine.tensor_parallel, engine.pipeline_parallel, engine.stage_layers) == (8, 2, (63, 63))
    assert (engine.gpu_resource, engine.gpu_resource_count) == ("nvidia.com/gpu", 8)  # each stage's pod
    assert engine.memory.weight_bytes == 50_731_673_600
    assert (engine.kv.bytes_per_token_per_gpu, engine.kv.bytes_per_token) == (16_128, 258_048)
    # What is left of 0.92 of the H100's 81,559 MiB after weights and the 8 % reserve, in 16-token blocks.
    claimed = int(81_559 * 2**20 * 0.92)
    reserve = int(81_559 * 2**20 * 0.08)
    assert engine.memory.kv_bytes == claimed - 50_731_673_600 - reserve
    assert engine.kv.tokens_per_replica == engine.memory.kv_bytes // (16 * 16_128) * 16
    assert engine.tokens.usd_per_hour == pytest.approx(2.49 * 16)
    assert plan.pools[0].gpus_used == 16


def test_pipeline_stages_scale_throughput_less_than_linearly():
    """An estimate: 10 % lost per doubling of stages (the network between them, the slowest stage)."""
    assert [pipeline_parallel_efficiency(n) for n in (1, 2, 4, 8)] == pytest.approx([1.0, 0.9, 0.8, 0.7])


def test_an_autoscaled_engine_across_nodes_scales_its_groups():
    """KEDA scales a LeaderWorkerSet through its scale subresource (spec.replicas: groups), as a Deployment."""
    from dataclasses import replace

    from tenantry.deploy.autoscaling import scaled_object_spec

    plan = plan_stack("stacks/h200-many-adapters.yaml")
    engine = plan.engine("llama-70b")
    assert scaled_object_spec(plan, engine, "http://prometheus")["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"}
    across = replace(engine, pipeline_parallel=2)
    assert scaled_object_spec(plan, across, "http://prometheus")["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "llama-70b"}


Spec = dict[str, Any]


def _nodes(count: int) -> Callable[[Spec], Spec]:
    """tests/unit/specs.py's whole-GPU pool with `count` nodes, named by nobody (its node_names lists one)."""
    return _chain(_set("cluster.node_pools.0.nodes", count), _delete("cluster.node_pools.0.node_names"))


INVALID = [
    # Whole nodes of whole GPUs, as many as the pool has, and no more stages than layers.
    ("pipeline-on-mig-pool", _set("engines.1.placement.pipeline_parallel", 2), "engines[1].placement.pipeline_parallel",
     "carved into MIG slices"),
    ("pipeline-stage-smaller-than-a-node", _chain(_nodes(2),
                                                  _set("engines.0.placement.pipeline_parallel", 2)),
     "engines[0].placement.tensor_parallel", "takes whole nodes: set it to the 8 GPUs"),
    ("pipeline-longer-than-the-pool", _set("engines.0.placement", {"pool": "whole", "tensor_parallel": 8,
                                                                   "pipeline_parallel": 2}),
     "engines[0].placement.pipeline_parallel", "2 nodes per replica, but pool 'whole' has 1"),
    ("pipeline-stages-beyond-the-layers", _chain(_nodes(40),
                                                 _set("engines.0.placement", {"pool": "whole", "tensor_parallel": 8,
                                                                              "pipeline_parallel": 33}),
                                                 _set("engines.0.model", "llama-3.1-8b"),
                                                 _set("engines.0.weights", "bf16")),
     "engines[0].placement.pipeline_parallel", "has 32 layers; 33 pipeline stages"),
    ("catalog-model-without-a-pin", _chain(_nodes(2), _set("engines.0.replicas", 1),
                                           _set("engines.0.model", "llama-3.1-405b"),
                                           _set("engines.0.placement", {"pool": "whole", "tensor_parallel": 8,
                                                                        "pipeline_parallel": 2})),
     "engines[0].revision", "catalog knows its shape but pins no commit"),
]
NOT_FITTING = [
    ("pool-out-of-nodes-for-stages", _chain(_nodes(2),
                                            _set("engines.0.placement", {"pool": "whole", "tensor_parallel": 8,
                                                                         "pipeline_parallel": 2}),
                                            _set("platform.model_cache", {"access_mode": "ReadWriteMany"})),
     "cluster.node_pools[0]", "tensor-parallel groups of 8, 8, 8, 8"),
    ("stages-on-a-read-write-once-claim", _chain(_nodes(2), _set("engines.0.replicas", 1),
                                                 _set("engines.0.placement", {"pool": "whole", "tensor_parallel": 8,
                                                                              "pipeline_parallel": 2})),
     "engines[0].placement.pipeline_parallel", "one node at a time can mount when ReadWriteOnce"),
    ("405b-on-one-node", _chain(_set("engines.0.model", "llama-3.1-405b"), _set("engines.0.revision", "a-mirror"),
                                _set("engines.0.weights", "bf16"), _set("engines.0.replicas", 1),
                                _set("engines.0.placement.tensor_parallel", 8)),
     "engines[0].placement", "pipeline_parallel across nodes"),
]


@pytest.mark.parametrize(("mutate", "path", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_a_layout_vllm_or_the_cluster_cannot_run_is_refused_with_its_field(mutate, path, words):
    _refused_at(mutate, path, words)


@pytest.mark.parametrize(("mutate", "path", "words"), [c[1:] for c in NOT_FITTING], ids=[c[0] for c in NOT_FITTING])
def test_a_layout_that_does_not_fit_is_refused_with_its_field(mutate, path, words):
    _not_fitting_at(mutate, path, words)
