"""Fitting engine replicas into node pools: TP groups into nodes, replicas into MIG slices.

The arithmetic first (pure functions), then each pool's PoolPlan with the
refusals that name the pool.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from tenantry.plan.model import EnginePlan, MigSlices, PoolPlan
from tenantry.plan.notes import Notes
from tenantry.spec.schema import NodePoolSpec
from tenantry.units import count


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


def plan_pool(index: int, pool: NodePoolSpec, engines: tuple[EnginePlan, ...], notes: Notes) -> PoolPlan:
    path = f"cluster.node_pools[{index}]"
    mine = [e for e in engines if e.pool == pool.name]
    gpus = pool.nodes * pool.gpus_per_node
    layout = tuple(pool.mig_layout) if pool.mig_layout else None
    slices: tuple[MigSlices, ...] = ()
    if layout:
        slices = _mig_slices(path, pool, layout, mine, notes)
        gpus_used = gpus if mine else 0
    else:
        # A replica across nodes is one group per pipeline stage, each a whole node (the spec's checks).
        groups = [e.tensor_parallel for e in mine for _ in range(e.most_replicas * e.pipeline_parallel)]
        gpus_used = sum(groups)
        if not pack_tp_groups(groups, pool.nodes, pool.gpus_per_node):
            notes.refuse(
                path,
                f"engines need {gpus_used} GPUs in tensor-parallel groups of "
                f"{', '.join(str(g) for g in sorted(groups, reverse=True))} but pool {pool.name} has "
                f"{count(pool.nodes, 'node')} x {count(pool.gpus_per_node, 'GPU')}",
            )
    return PoolPlan(
        name=pool.name,
        gpu=pool.gpu,
        nodes=pool.nodes,
        gpus_per_node=pool.gpus_per_node,
        gpu_hour_price_usd=pool.gpu_hour_price_usd,
        mig_layout=layout,
        mig_config=mig_config_name(layout) if layout else None,
        gpus=gpus,
        gpus_used=gpus_used,
        mig_slices=slices,
        node_label=pool.name,
        node_names=tuple(pool.node_names) if pool.node_names else None,
    )


def _mig_slices(
    path: str, pool: NodePoolSpec, layout: tuple[str, ...], mine: list[EnginePlan], notes: Notes
) -> tuple[MigSlices, ...]:
    """Slices of each profile the pool carves, and how many the engines placed on it use."""
    available = mig_slices_available(layout, pool.nodes * pool.gpus_per_node)
    used: dict[str, int] = defaultdict(int)
    for e in mine:
        used[e.mig_profile or ""] += e.most_replicas
    slices = tuple(MigSlices(profile=p, available=available[p], used=used.get(p, 0)) for p in sorted(available))
    for s in slices:
        if s.used > s.available:
            notes.refuse(
                path,
                f"engines need {s.used} {s.profile} slices but pool {pool.name} carves {s.available} "
                f"({count(pool.nodes, 'node')} x {count(pool.gpus_per_node, 'GPU')} x "
                f"{layout.count(s.profile)} per GPU)",
            )
    return slices
