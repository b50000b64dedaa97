"""Fitting engine replicas into node pools: TP groups into nodes, replicas into MIG slices."""

from __future__ import annotations

from collections import Counter


def pack_tp_groups(group_sizes: list[int], nodes: int, gpus_per_node: int) -> bool:
    """First-fit decreasing: can these tensor-parallel groups (each must stay
    inside one node) be placed on `nodes` nodes of `gpus_per_node` GPUs?
    Exact when every size divides gpus_per_node and sizes are powers of two,
    which is what the spec's TP checks leave."""
    free = [gpus_per_node] * nodes
    for size in sorted(group_sizes, reverse=True):
        node = next((i for i, f in enumerate(free) if f >= size), None)
        if node is None:
            return False
        free[node] -= size
    return True


def mig_slices_available(layout: tuple[str, ...], gpus: int) -> Counter[str]:
    per_gpu = Counter(layout)
    return Counter({profile: count * gpus for profile, count in per_gpu.items()})


def mig_config_name(layout: tuple[str, ...]) -> str:
    """A stable mig-parted config name for a layout: 'tenantry-1x3g.40gb-2x2g.20gb'."""
    counts = Counter(layout)
    parts = [f"{counts[p]}x{p}" for p in sorted(counts, key=lambda p: (-int(p.split("g.")[0]), p))]
    return "tenantry-" + "-".join(parts).replace("+", "")
