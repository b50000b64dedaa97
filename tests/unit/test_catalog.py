"""The catalog: the GPU types and models the spec reference names are there, and every figure agrees
with its stated source rule."""

from __future__ import annotations

import re

import pytest

from tenantry.catalog.gpus import (
    GPU_TYPES,
    MIG_MEMORY_SLICES,
    gpu_resources,
    mig_resource,
    place_mig_layout,
    valid_mig_layouts,
)
from tenantry.catalog.models import CATALOG_MODELS, estimate_parameters
from tenantry.catalog.throughput import (
    DECODE_BANDWIDTH_EFFICIENCY,
    PREFILL_MFU,
    REFERENCE_BATCH,
    REFERENCE_CONTEXT,
    SIZE_CLASSES,
    THROUGHPUT_PER_GPU,
    size_class,
    tensor_parallel_efficiency,
)

REQUIRED_GPUS = ["A100-40GB", "A100-80GB", "H100-80GB-SXM", "H100-80GB-PCIe", "H200-141GB", "L40S-48GB", "B200"]
REQUIRED_MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.2-3b", "qwen2.5-7b", "qwen2.5-32b", "qwen2.5-72b",
                   "mistral-7b", "mixtral-8x7b", "tenantry-tiny"]


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_required_gpu_types_are_in_the_catalog_with_a_source(name):
    gpu = GPU_TYPES[name]
    assert gpu.memory_bytes > 30 * 2**30
    assert gpu.source


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_mig_capable_gpus_list_seven_profiles_that_fit_their_memory(name):
    gpu = GPU_TYPES[name]
    if name == "L40S-48GB":
        assert not gpu.mig_capable
        return
    names = [p.name for p in gpu.mig_profiles]
    assert len(names) == 7 and any(n.endswith("+me") for n in names)
    whole = gpu.mig_profiles[-1]
    assert whole.compute_slices == 7 and whole.memory_slices == MIG_MEMORY_SLICES
    assert whole.memory_bytes <= gpu.memory_bytes
    for profile in gpu.mig_profiles:
        # Names carry the compute slices: 3g.40gb has 3 of 7.
        assert profile.name.startswith(f"{profile.compute_slices}g.")
        assert profile.max_instances * profile.memory_slices <= MIG_MEMORY_SLICES or profile.memory_slices == 1


def test_h100_profiles_match_nvidia_smi():
    h100 = GPU_TYPES["H100-80GB-SXM"]
    table = {p.name: (round(p.memory_gib, 2), p.max_instances) for p in h100.mig_profiles}
    assert table == {
        "1g.10gb": (9.75, 7), "1g.10gb+me": (9.75, 1), "1g.20gb": (19.62, 4), "2g.20gb": (19.62, 3),
        "3g.40gb": (39.5, 2), "4g.40gb": (39.5, 1), "7g.80gb": (79.25, 1),
    }


@pytest.mark.parametrize(
    ("layout", "placeable"),
    [
        (("7g.80gb",), True),
        (("4g.40gb", "3g.40gb"), True),
        (("3g.40gb", "3g.40gb"), True),
        (("3g.40gb", "2g.20gb", "2g.20gb"), True),
        (("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"), True),  # needs 3g at slice 4, not 0
        (("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"), True),
        (("1g.10gb",) * 7, True),
        (("1g.20gb",) * 4, True),
        (("1g.10gb",) * 8, False),  # seven compute slices
        (("3g.40gb", "3g.40gb", "1g.10gb"), False),  # both 3g take four memory slices each
        (("4g.40gb", "4g.40gb"), False),
        (("7g.80gb", "1g.10gb"), False),
        (("1g.10gb+me", "1g.10gb+me"), False),  # media engines exist once
        (("1g.20gb",) * 5, False),
        (("nope",), False),
    ],
)
def test_h100_mig_placement_rules(layout, placeable):
    assert (place_mig_layout(GPU_TYPES["H100-80GB-SXM"], layout) is not None) is placeable


@pytest.mark.parametrize("name", [g for g in REQUIRED_GPUS if g != "L40S-48GB"])
def test_valid_layouts_are_placeable_and_maximal(name):
    gpu = GPU_TYPES[name]
    layouts = valid_mig_layouts(name)
    assert (gpu.mig_profiles[-1].name,) in layouts
    for layout in layouts:
        assert place_mig_layout(gpu, layout) is not None
        assert all(place_mig_layout(gpu, layout + (p.name,)) is None for p in gpu.mig_profiles)


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_model_totals_match_their_shapes(name):
    arch = CATALOG_MODELS[name].architecture
    assert estimate_parameters(arch) == arch.total_parameters
    assert arch.attention_heads % arch.kv_heads == 0


def test_catalog_models_are_pinned_or_leave_the_pin_to_the_engine():
    """llama-3.1-405b was added without the Hub to read a commit from: its engines must pin one (refused
    otherwise: tests/unit/test_multi_node.py)."""
    for model in CATALOG_MODELS.values():
        assert model.revision is None or model.revision.lower() not in {"", "main", "latest"}
        assert model.source.startswith(("hf://", "local://"))
    assert [m.name for m in CATALOG_MODELS.values() if m.revision is None] == ["llama-3.1-405b"]


@pytest.mark.parametrize("gpu_name", REQUIRED_GPUS)
def test_throughput_table_follows_its_documented_derivation(gpu_name):
    gpu = GPU_TYPES[gpu_name]
    for klass in SIZE_CLASSES:
        prefill, decode = THROUGHPUT_PER_GPU[gpu_name][klass.name]
        expected_prefill = gpu.bf16_dense_tflops * 1e12 * PREFILL_MFU / (2 * klass.representative_parameters)
        bytes_per_step = (2 * klass.representative_parameters
                          + REFERENCE_BATCH * REFERENCE_CONTEXT * klass.representative_kv_bytes_per_token)
        expected_decode = REFERENCE_BATCH / (bytes_per_step / (gpu.memory_bandwidth_tb_s * 1e12 * DECODE_BANDWIDTH_EFFICIENCY))
        assert prefill == pytest.approx(expected_prefill, abs=6)
        assert decode == pytest.approx(expected_decode, abs=6)


def test_size_classes():
    assert size_class(3_212_749_824) == "small"
    assert size_class(8_030_261_248) == "8b"
    assert size_class(12_879_925_248) == "14b"
    assert size_class(70_553_706_496) == "70b"
    assert size_class(405_000_000_000) == "xl"


def test_tensor_parallel_efficiency_falls_faster_over_pcie():
    assert tensor_parallel_efficiency(1, "nvlink") == 1.0
    assert tensor_parallel_efficiency(8, "nvlink") == pytest.approx(0.85)
    assert tensor_parallel_efficiency(8, "pcie") == pytest.approx(0.55)


# A qualified resource name's name part (k8s.io/apimachinery, validation.IsQualifiedName).
_RESOURCE_NAME = re.compile(r"^nvidia\.com/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def test_mig_resources_are_named_as_the_device_plugin_advertises_them():
    assert mig_resource("3g.40gb") == "nvidia.com/mig-3g.40gb"
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    names = gpu_resources(["A100-80GB", "H100-80GB-SXM", "A100-80GB"])
    assert names[0] == "nvidia.com/gpu" and len(names) == len(set(names))
    # A100-80GB and H100 share their seven profile names; each is listed once.
    assert len(names) == 1 + 7
    assert all(_RESOURCE_NAME.match(n) for n in names), names
    assert gpu_resources(["L40S-48GB"]) == ("nvidia.com/gpu",)
