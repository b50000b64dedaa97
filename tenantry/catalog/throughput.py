"""Throughput estimates per GPU type and model size class.

These are estimates, not measurements: every engine in a spec can override
them with figures measured on its own hardware (`engines[].throughput`). They
feed the sustainable-TPM check and the per-token prices the gateway charges.

Each cell is (prefill, decode) tokens per second for ONE GPU running a bf16
model of the class's representative size, at the reference batch of
REFERENCE_BATCH concurrent sequences with REFERENCE_CONTEXT tokens of context:

- prefill is compute-bound: bf16 dense FLOPS x 40 % model-FLOPs utilisation
  / (2 x parameters).
- decode is memory-bound: each step reads the weights once and every
  sequence's KV cache, at 60 % of HBM bandwidth:
  REFERENCE_BATCH / ((2 x parameters + batch x context x KV bytes per token)
  / (0.6 x bandwidth)).

Bandwidth and FLOPS come from the datasheets cited in gpus.py; why these two
efficiencies is in docs/decisions.md (Throughput estimates from datasheets).
tests/unit/test_catalog.py re-derives every cell from these rules, so a figure
cannot drift from its explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

REFERENCE_BATCH = 64
REFERENCE_CONTEXT = 1024
PREFILL_MFU = 0.40
DECODE_BANDWIDTH_EFFICIENCY = 0.60

SizeClass = Literal["small", "8b", "14b", "32b", "70b", "xl"]


@dataclass(frozen=True, kw_only=True)
class SizeClassInfo:
    name: SizeClass
    max_parameters: float
    """Upper bound (inclusive) of the class, in parameters."""
    representative_parameters: int
    representative_kv_bytes_per_token: int
    representative: str


SIZE_CLASSES: tuple[SizeClassInfo, ...] = (
    SizeClassInfo(
        name="small", max_parameters=4e9, representative_parameters=3_212_749_824,
        representative_kv_bytes_per_token=114_688, representative="Llama-3.2-3B",
    ),
    SizeClassInfo(
        name="8b", max_parameters=10e9, representative_parameters=8_030_261_248,
        representative_kv_bytes_per_token=131_072, representative="Llama-3.1-8B",
    ),
    SizeClassInfo(
        name="14b", max_parameters=20e9, representative_parameters=14_770_033_664,
        representative_kv_bytes_per_token=196_608, representative="Qwen2.5-14B",
    ),
    SizeClassInfo(
        name="32b", max_parameters=40e9, representative_parameters=32_763_876_352,
        representative_kv_bytes_per_token=262_144, representative="Qwen2.5-32B",
    ),
    SizeClassInfo(
        name="70b", max_parameters=80e9, representative_parameters=70_553_706_496,
        representative_kv_bytes_per_token=327_680, representative="Llama-3.1-70B",
    ),
    SizeClassInfo(
        name="xl", max_parameters=float("inf"), representative_parameters=405_853_388_800,
        representative_kv_bytes_per_token=516_096, representative="Llama-3.1-405B",
    ),
)


def size_class(parameters: int) -> SizeClass:
    return next(c.name for c in SIZE_CLASSES if parameters <= c.max_parameters)


# (prefill, decode) tokens/s per GPU, bf16 weights, derived as the module docstring says.
THROUGHPUT_PER_GPU: dict[str, dict[SizeClass, tuple[int, int]]] = {
    "A100-40GB": {
        "small": (19420, 4280), "8b": (7770, 2420), "14b": (4220, 1410),
        "32b": (1900, 720), "70b": (880, 370), "xl": (150, 70),
    },
    "A100-80GB": {
        "small": (19420, 5620), "8b": (7770, 3180), "14b": (4220, 1850),
        "32b": (1900, 950), "70b": (880, 480), "xl": (150, 90),
    },
    "H100-80GB-SXM": {
        "small": (61570, 9230), "8b": (24630, 5220), "14b": (13390, 3030),
        "32b": (6040, 1560), "70b": (2800, 790), "xl": (490, 150),
    },
    "H100-80GB-PCIe": {
        "small": (47060, 5510), "8b": (18830, 3120), "14b": (10240, 1810),
        "32b": (4610, 930), "70b": (2140, 470), "xl": (370, 90),
    },
    "H200-141GB": {
        "small": (61570, 13220), "8b": (24630, 7480), "14b": (13390, 4340),
        "32b": (6040, 2230), "70b": (2800, 1130), "xl": (490, 220),
    },
    "L40S-48GB": {
        "small": (22540, 2380), "8b": (9020, 1350), "14b": (4900, 780),
        "32b": (2210, 400), "70b": (1030, 200), "xl": (180, 40),
    },
    "B200": {
        "small": (140070, 22030), "8b": (56040, 12460), "14b": (30470, 7240),
        "32b": (13730, 3710), "70b": (6380, 1890), "xl": (1110, 360),
    },
    # vLLM's CPU backend on a 2-core developer machine serving the local
    # stack's tiny models: a rough figure, there only so that local prices and
    # TPM checks have the same shape as on GPUs. No larger class runs there.
    "CPU": {
        "small": (2000, 200), "8b": (0, 0), "14b": (0, 0),
        "32b": (0, 0), "70b": (0, 0), "xl": (0, 0),
    },
}

# Relative speed of quantised weights against bf16. Decode reads fewer weight
# bytes (the KV reads stay); prefill gains only where the GPU has fp8 tensor
# cores, and AWQ's int4 kernels dequantise, so they do not speed up prefill.
DECODE_DTYPE_SPEEDUP = {"bf16": 1.0, "fp8": 1.4, "int4-awq": 1.6}
PREFILL_DTYPE_SPEEDUP = {"bf16": 1.0, "fp8": 1.6, "int4-awq": 1.0}


def tensor_parallel_efficiency(tensor_parallel: int, interconnect: str) -> float:
    """Fraction of linear scaling a TP group keeps: the all-reduce after every
    layer costs more the more GPUs share it and the slower the link. An
    estimate (5 % per doubling over NVLink, 15 % over PCIe)."""
    doublings = max(tensor_parallel.bit_length() - 1, 0)
    loss_per_doubling = 0.05 if interconnect == "nvlink" else 0.15
    return max(1.0 - loss_per_doubling * doublings, 0.25)


def pipeline_parallel_efficiency(pipeline_parallel: int) -> float:
    """Fraction of linear scaling pipeline stages keep: with sequences enough in flight every stage works,
    but each step waits for activations to cross the network between nodes and for the slowest stage.
    An estimate (10 % per doubling of stages); measure and give `throughput` for a real figure."""
    doublings = max(pipeline_parallel.bit_length() - 1, 0)
    return max(1.0 - 0.10 * doublings, 0.25)
