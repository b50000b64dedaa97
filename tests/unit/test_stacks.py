"""The shipped stacks plan to the numbers they were written for (docs/decisions.md:
Worked examples the arithmetic is checked against), checked by hand from
catalog figures where it matters."""

from __future__ import annotations

import math

import pytest

from tenantry.catalog.gpus import GPU_TYPES
from tenantry.catalog.models import CATALOG_MODELS
from tenantry.findings import PlanRefused
from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tenantry.stacks import plan_stack, require_fit, stack_path


def test_h100x8_shared_70b_by_hand():
    p = plan_stack("h100x8-shared-70b")
    engine = p.engine("llama-70b")
    device = GPU_TYPES["H100-80GB-SXM"].memory_bytes  # 81,559 MiB
    weights_per_gpu = math.ceil(CATALOG_MODELS["llama-3.1-70b"].architecture.total_parameters * 2 / 8)
    reserve = int(device * 0.10)
    kv = int(device * 0.90) - weights_per_gpu - reserve
    assert (engine.memory.weight_bytes, engine.memory.reserve_bytes, engine.memory.kv_bytes) == (weights_per_gpu, reserve, kv)
    assert engine.kv.bytes_per_token == 2 * 80 * 8 * 128 * 1  # fp8 KV cache
    assert engine.kv.bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 1  # one KV head per GPU at TP 8
    tokens = kv // (16 * 20_480) * 16  # whole KV blocks of 16 tokens, as vLLM allocates them
    assert engine.kv.tokens_per_replica == tokens
    assert engine.kv.sequences_at_max_context == tokens // 16_384
    # Concurrency-weighted typical context of the five tenants (prompt + output).
    typical = round((50 * 1050 + 15 * 6400 + 25 * 3500 + 40 * 2200 + 5 * 2000) / (50 + 15 + 25 + 40 + 5))
    assert engine.kv.typical_context == typical == 2474
    assert engine.kv.max_num_seqs == 256  # KV holds ~1,000 at that context; the spec caps the batch
    assert (engine.slots.capacity, engine.slots.reserved_total, engine.slots.shared) == (256, 65, 191)
    assert engine.gpu_resource == "nvidia.com/gpu" and engine.gpu_resource_count == 8
    # The five tenants add up to 210K TPM.
    assert engine.tokens.demand_tpm == 210_000 and engine.tokens.guaranteed_tpm == 110_000
    assert sorted(t.name for t in p.tenants) == ["code-agent", "extraction-batch", "legal-rag", "research", "support-chat"]


def test_an_h100x8_node_holds_about_1_3m_tokens_with_a_bf16_cache():
    text = stack_path("h100x8-shared-70b").read_text().replace("kv_cache_dtype: fp8", "kv_cache_dtype: auto")
    engine = plan(load_spec_text(text), "variant").engine("llama-70b")
    aggregate = engine.kv.tokens_per_replica  # one replica spans the node
    assert aggregate == pytest.approx(1.3e6, rel=0.06)


def test_mig_stack_mixes_slices_and_tensor_parallelism():
    p = plan_stack("h100-mig-mixed")
    assert p.mig_strategy == "mixed"
    mig_pool = next(pool for pool in p.pools if pool.mig_layout)
    assert mig_pool.mig_config == "tenantry-1x3g.40gb-2x2g.20gb"
    assert {s.profile: (s.used, s.available) for s in mig_pool.mig_slices} == {"3g.40gb": (8, 8), "2g.20gb": (16, 16)}
    big = p.engine("llama-70b")
    assert big.placement == "gpus" and big.tensor_parallel == 4 and big.pool == "h100-whole"
    small = p.engine("qwen-7b")
    assert small.placement == "mig" and small.gpu_resource == "nvidia.com/mig-3g.40gb" and small.gpu_resource_count == 1
    assert small.memory.device_bytes == GPU_TYPES["H100-80GB-SXM"].mig_profile("3g.40gb").memory_bytes


def test_many_adapters_stack_sizes_lora_from_the_plan():
    p = plan_stack("h200-many-adapters")
    engine = p.engine("llama-70b")
    assert len(engine.lora.adapters) == 200
    assert len({a.tenant for a in engine.lora.adapters}) == 20
    assert engine.lora.max_lora_rank == max(a.rank for a in engine.lora.adapters) == 32
    assert 1 <= engine.lora.max_loras < 200
    assert engine.lora.max_cpu_loras >= engine.lora.max_loras
    assert engine.memory.lora_bytes == engine.lora.max_loras * engine.lora.slot_bytes_per_gpu
    # The planner gave adapters about a tenth of what weights and reserve leave.
    free = engine.memory.claimed_bytes - engine.memory.weight_bytes - engine.memory.reserve_bytes
    assert engine.memory.lora_bytes <= 0.10 * free < engine.memory.lora_bytes + engine.lora.slot_bytes_per_gpu


def _adapter_slot_warnings(result) -> list[str]:
    return [w.message for w in result.warnings if w.path.endswith(".lora.max_loras")]


def test_guaranteed_adapters_sharing_too_few_slots_get_a_warning_naming_their_tenants():
    # 200 adapters, 256 sequences a batch, 15 slots: any 15 other adapters can keep acme's waiting.
    p = plan_stack("h200-many-adapters")
    guaranteed = sorted(t.name for t in p.tenants if t.tier == "guaranteed")
    (message,) = _adapter_slot_warnings(p)
    assert message.startswith("15 adapter slots for 200 adapters: guaranteed tenant(s) " + ", ".join(guaranteed))
    assert "200 slots, or their own engine" in message


def test_local_stack_gives_each_adapter_a_slot_and_one_slot_would_be_warned():
    assert not _adapter_slot_warnings(plan_stack("local"))
    text = stack_path("local").read_text().replace("max_loras: 2", "max_loras: 1")
    (message,) = _adapter_slot_warnings(plan(load_spec_text(text), "one-slot"))
    assert "guaranteed tenant(s) acme can wait" in message and "2 slots" in message


@pytest.mark.parametrize(("stack", "engine", "params", "cache_gib", "startup"), [
    # 70,553,706,496 x 2 B = 141,107,412,992 B = 131.42 GiB; x 1.15 + 1 GiB = 152.13 GiB -> 153 GiB;
    # 300 s + 6 s x 132 GiB = 1,092 s.
    ("h200-many-adapters", "llama-70b", 70_553_706_496, 153, 1092),
    ("h100-mig-mixed", "llama-70b", 70_553_706_496, 153, 1092),
    # 7,248,023,552 x 2 B = 14,496,047,104 B = 13.50 GiB; x 1.15 + 1 GiB = 16.53 GiB -> 17 GiB;
    # 300 s + 6 s x 14 GiB = 384 s.
    ("h100-mig-mixed", "mistral-7b", 7_248_023_552, 17, 384),
])
def test_engines_quantised_on_load_size_volume_and_startup_from_the_bf16_checkpoint(
        stack, engine, params, cache_gib, startup):
    e = plan_stack(stack).engine(engine)
    assert e.weights == "fp8" and e.quantize_on_load
    assert CATALOG_MODELS[e.model].architecture.total_parameters == params
    assert e.pod.download_bytes == params * 2
    assert e.pod.model_cache_bytes == cache_gib * 2**30
    assert e.pod.startup_seconds == startup


def test_local_stack_has_one_tenant_per_tier_and_adapters():
    p = plan_stack("local")
    assert {t.tier for t in p.tenants} == {"guaranteed", "best-effort", "spot"}
    tiny = p.engine("tiny")
    assert tiny.placement == "cpu" and tiny.gpu_resource is None
    assert tiny.lora.enabled and tiny.lora.max_loras == 2 and tiny.lora.max_lora_rank == 8
    assert p.gateway.fallbacks[0].model == "tiny" and p.gateway.fallbacks[0].to == ("micro",)
    assert p.tenant("acme").cache_salt == "tenant-acme" and p.tenant("initech").cache_salt is None
    # tiny falls back to micro, so every tenant calling tiny (or its adapters) may reach micro.
    assert p.tenant("acme").fallback_models == ("micro",) and p.tenant("globex").fallback_models == ()


def test_require_fit_stops_consumers_of_a_plan_that_does_not_fit():
    text = stack_path("local").read_text().replace("max_concurrency: 4\n    budget: {usd: 5", "max_concurrency: 400\n    budget: {usd: 5")
    crowded = plan(load_spec_text(text), "crowded")
    assert not crowded.fits
    with pytest.raises(PlanRefused) as caught:
        require_fit(crowded)
    assert "guaranteed tenants reserve" in str(caught.value)
    assert require_fit(plan_stack("local")).fits


def test_plan_is_deterministic_and_immutable():
    first, second = plan_stack("h200-many-adapters"), plan_stack("h200-many-adapters")
    assert first == second
    with pytest.raises(AttributeError):
        first.engines[0].kv.max_num_seqs = 1  # type: ignore[misc]


def test_a_tenants_contract_rate_is_its_rpm_or_its_tpm_at_the_typical_request_whichever_binds():
    local = {t.name: t for t in plan_stack("local").tenants}
    assert local["acme"].contract_requests_per_second == pytest.approx(12000 / (200 + 48) / 60)  # TPM binds (48.4 < 120 a minute)
    text = stack_path("local").read_text(encoding="utf-8").replace("rpm: 120", "rpm: 30")
    acme = plan(load_spec_text(text), "slow-rpm").tenant("acme")
    assert acme.contract_requests_per_second == pytest.approx(30 / 60)  # now RPM binds
