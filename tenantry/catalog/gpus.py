"""GPU types tenantry can plan for, with their MIG profiles.

Every figure carries its source. Memory is what the device reports to the
serving engine (`nvidia-smi --query-gpu=memory.total`, in MiB), not the
marketing number, because vLLM sizes its budget from that total.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from itertools import combinations_with_replacement
from typing import Literal

MIB = 1024**2
GIB = 1024**3
GB = 10**9

# MIG geometry shared by every 7-compute-slice GPU (A100, H100, H200, B200):
# eight memory slices, seven compute slices, and the start positions printed by
# `nvidia-smi mig -lgipp` (NVIDIA MIG user guide, "Getting Started with MIG"):
#   1g (1 memory slice)  {0,1,2,3,4,5,6}:1      1g.2x (2 slices) {0,2,4,6}:2
#   2g                   {0,2,4}:2              3g               {0,4}:4
#   4g                   {0}:4                  7g               {0}:8
MIG_MEMORY_SLICES = 8
MIG_COMPUTE_SLICES = 7

Interconnect = Literal["nvlink", "pcie", "none"]


@dataclass(frozen=True, kw_only=True)
class MigProfile:
    """One MIG GPU-instance profile as NVIDIA's MIG user guide lists it."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int
    max_instances: int
    placements: tuple[int, ...]
    """Start indexes on the eight memory slices where an instance may sit."""

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


@dataclass(frozen=True, kw_only=True)
class GpuType:
    name: str
    memory_bytes: int
    memory_bandwidth_tb_s: float
    bf16_dense_tflops: float
    fp8_tensor_cores: bool
    interconnect: Interconnect
    mig_profiles: tuple[MigProfile, ...] = ()
    source: str = ""

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


def _seven_slice_profiles(
    names: tuple[str, str, str, str, str, str, str], memory_bytes: tuple[int, ...]
) -> tuple[MigProfile, ...]:
    """Profiles of a 7-compute-slice GPU in NVIDIA's order:
    1g, 1g+me, 1g (2 memory slices), 2g, 3g, 4g, 7g."""
    shape = (
        # compute, memory slices, max instances, placements
        (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
        (1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),  # +me: media engines exist once per GPU
        (1, 2, 4, (0, 2, 4, 6)),
        (2, 2, 3, (0, 2, 4)),
        (3, 4, 2, (0, 4)),
        (4, 4, 1, (0,)),
        (7, 8, 1, (0,)),
    )
    return tuple(
        MigProfile(
            name=name, compute_slices=compute, memory_slices=memory, memory_bytes=mem_bytes,
            max_instances=instances, placements=placements,
        )
        for name, mem_bytes, (compute, memory, instances, placements) in zip(
            names, memory_bytes, shape, strict=True
        )
    )


def _gib(*values: float) -> tuple[int, ...]:
    return tuple(int(v * GIB) for v in values)


def _gb(*values: float) -> tuple[int, ...]:
    return tuple(int(v * GB) for v in values)


# Memory per profile: the GiB `nvidia-smi mig -lgip` prints. Where drivers print
# slightly different values, the lowest seen is used (a planner should err small).
_A100_40GB_MIG = _seven_slice_profiles(
    ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    # MIG user guide, `nvidia-smi mig -lgip` on A100-SXM4-40GB
    _gib(4.75, 4.75, 9.62, 9.62, 19.50, 19.50, 39.25),
)
_A100_80GB_MIG = _seven_slice_profiles(
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    # `nvidia-smi mig -lgip` on A100-SXM4-80GB (R470-R535 drivers print 78.50-79.00 for 7g)
    _gib(9.50, 9.50, 19.50, 19.50, 39.25, 39.25, 78.50),
)
_H100_80GB_MIG = _seven_slice_profiles(
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    # `nvidia-smi mig -lgip` on H100 80GB HBM3 (driver 560)
    _gib(9.75, 9.75, 19.62, 19.62, 39.50, 39.50, 79.25),
)
_H200_MIG = _seven_slice_profiles(
    ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    # Profile names from NVIDIA's MIG user guide (H200 table). No -lgip listing
    # was at hand: the GB in each name is taken as decimal gigabytes, which is
    # below what the device reports, so the planner errs small.
    _gb(18, 18, 35, 35, 71, 71, 141),
)
_B200_MIG = _seven_slice_profiles(
    ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    # Profile names from NVIDIA's MIG user guide (B200 table); memory as for H200.
    _gb(23, 23, 45, 45, 90, 90, 180),
)

GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType(
            name="A100-40GB", memory_bytes=40960 * MIB, memory_bandwidth_tb_s=1.555,
            bf16_dense_tflops=312.0, fp8_tensor_cores=False, interconnect="nvlink",
            mig_profiles=_A100_40GB_MIG,
            source="NVIDIA A100 datasheet (SXM4): 1,555 GB/s, 312 TFLOPS BF16 dense; "
            "nvidia-smi memory.total 40960 MiB",
        ),
        GpuType(
            name="A100-80GB", memory_bytes=81920 * MIB, memory_bandwidth_tb_s=2.039,
            bf16_dense_tflops=312.0, fp8_tensor_cores=False, interconnect="nvlink",
            mig_profiles=_A100_80GB_MIG,
            source="NVIDIA A100 datasheet (SXM4 80GB): 2,039 GB/s, 312 TFLOPS BF16 dense; "
            "nvidia-smi memory.total 81920 MiB",
        ),
        GpuType(
            name="H100-80GB-SXM", memory_bytes=81559 * MIB, memory_bandwidth_tb_s=3.35,
            bf16_dense_tflops=989.0, fp8_tensor_cores=True, interconnect="nvlink",
            mig_profiles=_H100_80GB_MIG,
            source="NVIDIA H100 datasheet (SXM5): 3.35 TB/s, 989 TFLOPS BF16 dense; "
            "nvidia-smi memory.total 81559 MiB",
        ),
        GpuType(
            name="H100-80GB-PCIe", memory_bytes=81559 * MIB, memory_bandwidth_tb_s=2.0,
            bf16_dense_tflops=756.0, fp8_tensor_cores=True, interconnect="pcie",
            mig_profiles=_H100_80GB_MIG,
            source="NVIDIA H100 datasheet (PCIe): 2.0 TB/s, 756 TFLOPS BF16 dense; "
            "nvidia-smi memory.total 81559 MiB",
        ),
        GpuType(
            name="H200-141GB", memory_bytes=143771 * MIB, memory_bandwidth_tb_s=4.8,
            bf16_dense_tflops=989.0, fp8_tensor_cores=True, interconnect="nvlink",
            mig_profiles=_H200_MIG,
            source="NVIDIA H200 datasheet (SXM): 4.8 TB/s, 989 TFLOPS BF16 dense; "
            "nvidia-smi memory.total 143771 MiB",
        ),
        GpuType(
            name="L40S-48GB", memory_bytes=46068 * MIB, memory_bandwidth_tb_s=0.864,
            bf16_dense_tflops=362.0, fp8_tensor_cores=True, interconnect="pcie",
            mig_profiles=(),
            source="NVIDIA L40S datasheet: 864 GB/s, 362 TFLOPS BF16 dense, no MIG; "
            "nvidia-smi memory.total 46068 MiB",
        ),
        GpuType(
            name="B200", memory_bytes=183359 * MIB, memory_bandwidth_tb_s=8.0,
            bf16_dense_tflops=2250.0, fp8_tensor_cores=True, interconnect="nvlink",
            mig_profiles=_B200_MIG,
            source="NVIDIA HGX B200 datasheet (per GPU): 8 TB/s, 2.25 PFLOPS BF16 dense; "
            "nvidia-smi memory.total 183359 MiB",
        ),
        GpuType(
            # The local stack's device: vLLM's CPU backend on the developer's
            # machine. Its memory is the budget tenantry gives one local engine
            # (weights, reserve and the KV cache it is given), not a hardware figure:
            # the local models are a few MB, and 512 MiB still caches some 400,000 of
            # tiny's tokens, about 200 of its longest requests, where it runs 8.
            # vLLM touches all of it at start: at 2 GiB each engine's worker held
            # 2.3 GB, and `make test` beside `make local` ran six (docs/decisions.md).
            name="CPU", memory_bytes=512 * MIB, memory_bandwidth_tb_s=0.0,
            bf16_dense_tflops=0.0, fp8_tensor_cores=False, interconnect="none",
            mig_profiles=(),
            source="tenantry's budget for one local vLLM CPU engine",
        ),
    )
}


def gpu_type(name: str) -> GpuType | None:
    return GPU_TYPES.get(name)


def place_mig_layout(gpu: GpuType, layout: tuple[str, ...]) -> tuple[int, ...] | None:
    """Place the MIG instances of `layout` (profile names) on one GPU following
    the hardware's placement rules. Returns each instance's start memory slice,
    in layout order, or None when the combination cannot be created."""
    profiles = [gpu.mig_profile(name) for name in layout]
    if not profiles or any(p is None for p in profiles):
        return None
    if sum(p.compute_slices for p in profiles) > MIG_COMPUTE_SLICES:  # type: ignore[union-attr]
        return None
    if any(profiles.count(p) > p.max_instances for p in profiles):  # type: ignore[union-attr]
        return None
    # Largest and least flexible first: a depth-first search over at most
    # seven instances, each with at most seven starts.
    order = sorted(
        range(len(profiles)),
        key=lambda i: (-profiles[i].memory_slices, len(profiles[i].placements)),  # type: ignore[union-attr]
    )
    used = [False] * MIG_MEMORY_SLICES
    starts = [0] * len(profiles)

    def fit(k: int) -> bool:
        if k == len(order):
            return True
        profile = profiles[order[k]]
        for start in profile.placements:  # type: ignore[union-attr]
            span = range(start, start + profile.memory_slices)  # type: ignore[union-attr]
            if span.stop <= MIG_MEMORY_SLICES and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                starts[order[k]] = start
                if fit(k + 1):
                    return True
                for s in span:
                    used[s] = False
        return False

    return tuple(starts) if fit(0) else None


@cache
def valid_mig_layouts(gpu_name: str) -> tuple[tuple[str, ...], ...]:
    """Every maximal profile combination one GPU of this type accepts (no
    further instance can be added), as NVIDIA's placement rules allow."""
    gpu = GPU_TYPES[gpu_name]
    names = [p.name for p in gpu.mig_profiles]
    found: list[tuple[str, ...]] = []
    for size in range(1, MIG_COMPUTE_SLICES + 1):
        for layout in combinations_with_replacement(names, size):
            if place_mig_layout(gpu, layout) is None:
                continue
            if any(place_mig_layout(gpu, layout + (extra,)) for extra in names):
                continue
            found.append(layout)
    return tuple(found)


WHOLE_GPU_RESOURCE = "nvidia.com/gpu"


def mig_resource(profile: str) -> str:
    """The extended resource the device plugin advertises for a MIG profile under the mixed strategy. A resource
    name may not hold "+", so a media-extension profile such as 1g.10gb+me is advertised as mig-1g.10gb.me
    (NVIDIA/k8s-device-plugin, internal/rm/rm.go)."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def gpu_resources(pool_gpus: Iterable[str]) -> tuple[str, ...]:
    """Every GPU resource nodes of these GPU types can advertise: whole GPUs, and each MIG profile of the
    MIG-capable ones (not only the pools' layouts: a node re-partitioned by hand advertises the others)."""
    names = [WHOLE_GPU_RESOURCE]
    for gpu in dict.fromkeys(pool_gpus):
        names += [mig_resource(p.name) for p in GPU_TYPES[gpu].mig_profiles if mig_resource(p.name) not in names]
    return tuple(names)
