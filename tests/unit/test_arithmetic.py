"""The planner's arithmetic against figures computed by hand here, and against
worked examples whose figures the tests quote: KV slots and adapters on
2 x 80 GB, adapter sizes on Llama-3-70B, the sizing of an 8-GPU node
(docs/decisions.md: Worked examples the arithmetic is checked against)."""

from __future__ import annotations

import math

import pytest

from tenantry.catalog.gpus import GPU_TYPES
from tenantry.catalog.models import CATALOG_MODELS, Architecture
from tenantry.plan.build import engine_scrape_interval
from tenantry.plan.lora import adapter_bytes, adapters_that_fit, max_lora_rank, slot_bytes_per_gpu
from tenantry.plan.memory import (
    kv_blocks,
    kv_budget_bytes,
    kv_bytes_per_token,
    kv_heads_per_gpu,
    sequences_in_blocks,
    weight_bytes,
)
from tenantry.plan.placement import mig_config_name, pack_tp_groups
from tenantry.plan.slots import Demand, concurrency_share, plan_slots
from tenantry.plan.tokens import gpu_seconds_per_1k_tokens, sustainable_tpm, usd_per_1k_tokens

LLAMA_70B = CATALOG_MODELS["llama-3.1-70b"].architecture
LLAMA_8B = CATALOG_MODELS["llama-3.1-8b"].architecture
ALL_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]


# --- KV cache --------------------------------------------------------------------------------


def test_kv_bytes_per_token_80_layers_8_heads_128_dim_2_bytes():
    assert kv_bytes_per_token(layers=80, kv_heads=8, head_dim=128, dtype_bytes=2) == 2 * 80 * 8 * 128 * 2 == 327_680


def test_kv_bytes_per_token_fp8_halves_it():
    assert kv_bytes_per_token(80, 8, 128, 1) == 163_840


def test_55_sequences_of_4k_tokens_fit_beside_a_70b_in_one_byte_on_two_80gb_gpus():
    # 2 x 80 GB, a 70B model at one byte per parameter (70 GB), a 10 % reserve
    # (16 GB): 74 GB of KV cache; a 4,096-token sequence needs 1.342 GB; 55 fit
    # (14,114 blocks of 16 tokens, 256 blocks a sequence).
    budget = kv_budget_bytes(device_bytes=160 * 10**9, utilisation=1.0, weight_bytes_per_gpu=70 * 10**9,
                             reserve_bytes=16 * 10**9)
    assert budget == 74 * 10**9
    per_token = kv_bytes_per_token(80, 8, 128, 2)
    assert per_token * 4096 == 1_342_177_280  # "1.342 GB"
    blocks = kv_blocks(budget, 16, per_token)
    assert blocks == 14_114
    assert sequences_in_blocks(blocks, 16, 4096) == 55


def test_reserving_22_16_and_16_of_55_slots_leaves_one_shared():
    # Tenants A, B, C hold 40 %, 30 %, 30 % of 55 slots: 22, 16, 16, one spare.
    slots = plan_slots(55, [
        Demand(tenant="a", tier="guaranteed", concurrency=22),
        Demand(tenant="b", tier="guaranteed", concurrency=16),
        Demand(tenant="c", tier="guaranteed", concurrency=16),
    ])
    assert [r.slots for r in slots.reserved] == [22, 16, 16]
    assert slots.reserved_total == 54
    assert slots.shared == 1


def test_doubling_the_context_halves_the_sequences_that_fit():
    blocks = kv_blocks(74 * 10**9, 16, 327_680)
    assert sequences_in_blocks(blocks, 16, 8192) == sequences_in_blocks(blocks, 16, 4096) // 2 == 27


def test_kv_heads_are_split_by_tensor_parallelism_and_replicated_beyond():
    assert kv_heads_per_gpu(8, 1) == 8
    assert kv_heads_per_gpu(8, 8) == 1
    assert kv_heads_per_gpu(4, 8) == 1  # Qwen2.5-7B at TP 8: each GPU keeps a copy of one head
    # Llama 3.1 70B at TP 8: one KV head per GPU, 40,960 bytes per token per GPU in bf16.
    assert kv_bytes_per_token(80, kv_heads_per_gpu(8, 8), 128, 2) == 40_960


def test_a_70b_in_bf16_at_tp8_is_17_5_gb_per_gpu_and_320_kib_of_kv_per_token():
    # "Model VRAM (70B BF16): ~140 GB (~17.5 GB/GPU at TP=8)", "~320 KB/token",
    # "~52 GB/GPU free for KV" -> "~1.3M tokens" on the 8-GPU node.
    weights = weight_bytes(LLAMA_70B, "bf16")
    assert weights == 70_553_706_496 * 2
    assert weights / 8 == pytest.approx(17.5e9, rel=0.01)
    assert kv_bytes_per_token(80, 8, 128, 2) == 320 * 1024
    assert 8 * 52e9 / kv_bytes_per_token(80, 8, 128, 2) == pytest.approx(1.3e6, rel=0.03)  # 1.27M


# --- weights ---------------------------------------------------------------------------------


def test_quantised_weights_keep_embeddings_in_16_bits():
    embeddings = 128_256 * 8192 * 2  # untied input embeddings and output head
    assert LLAMA_70B.embedding_parameters == embeddings == 2_101_346_304
    assert weight_bytes(LLAMA_70B, "fp8") == (70_553_706_496 - embeddings) * 1 + embeddings * 2 == 72_655_052_800
    per_weight_awq = (128 * 4 + 16 + 4) / 128 / 8  # 4-bit weights, a 16-bit scale and 4-bit zero per 128
    assert weight_bytes(LLAMA_70B, "int4-awq") == math.ceil((70_553_706_496 - embeddings) * per_weight_awq) + embeddings * 2


def test_moe_memory_follows_total_parameters():
    mixtral = CATALOG_MODELS["mixtral-8x7b"].architecture
    assert weight_bytes(mixtral, "bf16") == 46_702_792_704 * 2
    # Two of eight experts per token: about 12.9B parameters of compute.
    assert mixtral.active_parameters == 12_879_925_248


# --- LoRA ------------------------------------------------------------------------------------


def test_a_rank_16_adapter_on_llama_70b_weighs_414_mb_on_every_projection():
    # Per layer, rank 16, bf16: Q and O 524,288; K and V 294,912; gate, up and
    # down 1,179,648 each: 5,177,344 bytes; 80 layers ~395 MB.
    per_layer = 2 * 524_288 + 2 * 294_912 + 3 * 1_179_648
    assert per_layer == 5_177_344
    assert adapter_bytes(LLAMA_70B, 16, ALL_MODULES) == 80 * per_layer == 414_187_520
    assert adapter_bytes(LLAMA_70B, 16, ATTENTION) == 80 * (2 * 524_288 + 2 * 294_912) == 131_072_000  # "~125 MB"


def test_adapter_bytes_grow_linearly_with_rank():
    at_16 = adapter_bytes(LLAMA_70B, 16, ALL_MODULES)
    assert adapter_bytes(LLAMA_70B, 8, ALL_MODULES) * 2 == at_16
    assert adapter_bytes(LLAMA_70B, 64, ALL_MODULES) == 4 * at_16


def test_10_gb_holds_24_fully_targeted_or_76_attention_only_rank_16_adapters():
    # "about 10 GB are left ... around 25 fully targeted r=16 adapters or around 80 attention-only"
    assert adapters_that_fit(10 * 10**9, adapter_bytes(LLAMA_70B, 16, ALL_MODULES)) == 24
    assert adapters_that_fit(10 * 10**9, adapter_bytes(LLAMA_70B, 16, ATTENTION)) == 76


def test_a_thousand_adapters_on_four_square_projections_weigh_a_thousandth_of_a_thousand_bases():
    # Hidden 8,192, rank 16, four 8,192 x 8,192 projections per layer, 80 layers:
    # 83,886,080 parameters, 167.8 MB in two bytes; 1,000 of them 167.8 GB
    # against 140,000 GB for 1,000 copies of a 70B model in two bytes.
    square_attention = Architecture(
        layers=80, hidden_size=8192, attention_heads=64, kv_heads=64, head_dim=128, intermediate_size=28672,
        vocab_size=128256, total_parameters=70 * 10**9, max_context=8192,
    )
    one = adapter_bytes(square_attention, 16, ATTENTION)
    assert one == 83_886_080 * 2 == 167_772_160
    assert 1000 * one == pytest.approx(167.8e9, rel=1e-3)
    assert 1000 * weight_bytes(square_attention, "bf16") == 140_000 * 10**9


def test_adapter_bytes_ignore_repeated_modules():
    assert adapter_bytes(LLAMA_8B, 8, ["q_proj", "q_proj"]) == adapter_bytes(LLAMA_8B, 8, ["q_proj"])


def test_gpu_slot_is_every_module_at_max_rank_and_splits_with_tp():
    # At TP 1 a slot holds all seven projections: the fully targeted adapter size.
    assert slot_bytes_per_gpu(LLAMA_70B, 16, 1) == adapter_bytes(LLAMA_70B, 16, ALL_MODULES)
    # At TP 8: column-parallel B and row-parallel A are split, KV width is one head.
    r = 16
    per_layer = (
        r * (8192 + 8192 // 8)        # q: A whole, B split
        + 2 * r * (8192 + 128)        # k, v: one 128-wide head per GPU
        + r * (8192 // 8 + 8192)      # o: A split, B whole
        + 2 * r * (8192 + 28672 // 8)  # gate, up
        + r * (28672 // 8 + 8192)     # down
    )
    assert slot_bytes_per_gpu(LLAMA_70B, 16, 8) == 80 * per_layer * 2


@pytest.mark.parametrize(
    ("ranks", "expected"), [([8, 16], 16), ([16], 16), ([12], 16), ([1], 1), ([2], 8), ([200], 256), ([64, 8], 64)]
)
def test_max_lora_rank_is_the_highest_rank_rounded_only_to_what_vllm_accepts(ranks, expected):
    assert max_lora_rank(ranks) == expected


# --- slots, placement, tokens ----------------------------------------------------------------


@pytest.mark.parametrize(("concurrency", "share", "expected"), [(50, 1.0, 50), (30, 0.1, 3), (5, 0.5, 3), (80, 0.2, 16), (1, 0.01, 1)])
def test_concurrency_share_rounds_up_without_float_noise(concurrency, share, expected):
    assert concurrency_share(concurrency, share) == expected


def test_best_effort_and_spot_share_what_is_not_reserved():
    slots = plan_slots(100, [
        Demand(tenant="g", tier="guaranteed", concurrency=30),
        Demand(tenant="b", tier="best-effort", concurrency=50),
        Demand(tenant="s", tier="spot", concurrency=40),
    ])
    assert (slots.reserved_total, slots.shared, slots.best_effort_demand, slots.spot_demand) == (30, 70, 50, 40)


@pytest.mark.parametrize(
    ("groups", "nodes", "gpus", "fits"),
    [([8], 1, 8, True), ([4, 4], 1, 8, True), ([4, 4, 4], 1, 8, False), ([4, 2, 2], 1, 8, True),
     ([4, 4, 4], 2, 8, True), ([2] * 5, 1, 8, False), ([8, 8], 1, 8, False), ([], 1, 8, True)],
)
def test_tensor_parallel_groups_stay_inside_nodes(groups, nodes, gpus, fits):
    assert pack_tp_groups(groups, nodes, gpus) is fits


def test_mig_config_name_is_stable_and_label_safe():
    assert mig_config_name(("2g.20gb", "3g.40gb", "2g.20gb")) == "tenantry-1x3g.40gb-2x2g.20gb"
    assert mig_config_name(("1g.10gb+me", "1g.10gb")) == "tenantry-1x1g.10gb-1x1g.10gbme"


def test_cost_per_token_follows_utilisation():
    # 1,800 tokens/s shared vs 450 dedicated on the same two GPUs: 1.111 vs 4.444
    # GPU-seconds per 1,000 tokens, four times more.
    assert gpu_seconds_per_1k_tokens(2, 1800) == pytest.approx(1.111, abs=5e-4)
    assert gpu_seconds_per_1k_tokens(2, 450) == pytest.approx(4.444, abs=5e-4)
    assert gpu_seconds_per_1k_tokens(2, 450) / gpu_seconds_per_1k_tokens(2, 1800) == pytest.approx(4)


def test_price_per_1k_tokens_is_gpu_cost_of_their_time():
    # $3.60 per GPU-hour is $0.001 per GPU-second; 2 GPUs at 1,000 tokens/s take
    # 2 GPU-seconds per 1,000 tokens.
    assert usd_per_1k_tokens(3.60, 2, 1000) == pytest.approx(0.002)


def test_sustainable_tpm_weights_prompt_and_output_time():
    # 80 % prompt tokens at 10,000/s and 20 % output at 1,000/s: 0.00028 s per
    # token, 214,285 tokens per minute per replica.
    assert sustainable_tpm(10_000, 1_000, 0.8, replicas=1) == int(60 / (0.8 / 10_000 + 0.2 / 1_000)) == 214_285
    assert sustainable_tpm(10_000, 1_000, 0.8, replicas=3) == int(3 * 60 / (0.8 / 10_000 + 0.2 / 1_000))


def test_h100_figures_used_by_the_hand_checked_plan():
    h100 = GPU_TYPES["H100-80GB-SXM"]
    assert h100.memory_bytes == 81_559 * 2**20
    assert h100.mig_profile("3g.40gb").memory_bytes == int(39.50 * 2**30)


@pytest.mark.parametrize(("max_age", "interval"), [(10, 5), (11, 5), (30, 15), (60, 15), (3, 1), (1, 1), (0.5, 1)])
def test_engines_are_scraped_at_half_the_metrics_maximum_age_in_whole_seconds(max_age, interval):
    # At most half the age admission accepts, so one missed scrape still leaves a young
    # enough sample; never less often than kube-prometheus-stack's usual 15 s, never below 1 s.
    assert engine_scrape_interval(max_age) == interval


def test_a_body_has_its_size_at_64_kib_a_second_to_arrive_and_never_less_than_10_s():
    from tenantry.stacks import plan_stack

    local = plan_stack("local").gateway  # 2,048 tokens: 32 x 2,048 + 64 KiB = 128 KiB, 2 s at 64 KiB/s
    assert (local.max_request_bytes, local.request_read_seconds) == (131_072, 10.0)
    largest = plan_stack("h100x16-405b").gateway  # 16,384 tokens: 576 KiB, 9 s at 64 KiB/s, so the floor
    assert (largest.max_request_bytes, largest.request_read_seconds) == (589_824, 10.0)
