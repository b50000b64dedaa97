"""What one engine replica's pod asks of its node besides GPUs (docs/decisions.md: Engine pod sizing)."""

from __future__ import annotations

import math

from tenantry.plan.model import EnginePlan, LoraPlan, PlacementKind, PodPlan, PoolPlan
from tenantry.plan.notes import Notes
from tenantry.spec.fields import ModelCacheAccessMode

STARTUP_BASE_SECONDS = 300
"""Starting vLLM before any weight is read."""
STARTUP_SECONDS_PER_GIB = 6
"""Reading and loading one GiB of the checkpoint from the cache claim."""
POPULATE_BASE_SECONDS = 600
"""Before a cache Job fetches anything: scheduling, provisioning and attaching the claim, pulling the image."""
POPULATE_SECONDS_PER_GIB = 12
"""Fetching one GiB, twice the planned rate: a deadline must not kill a slow download that is still progressing."""


def _gib_ceil(n: float) -> int:
    return math.ceil(n / 2**30) * 2**30


def plan_pod(tensor_parallel: int, placement: PlacementKind, download_bytes: int, lora: LoraPlan,
             pipeline_parallel: int = 1) -> PodPlan:
    """vLLM keeps a CPU worker per GPU busy (tokenising, scheduling, detokenising), loads weights
    through host memory shard by shard, and keeps max_cpu_loras adapters in host memory.
    The cache claim, the start-up time and the cache Jobs' deadline follow the checkpoint as
    fetched (bf16 when vLLM quantises it while loading), not the weights as they sit on the GPU;
    the engine reads it from the claim, so its start-up holds no download
    (docs/decisions.md: Weights live in a cache claim filled once). A pod of a replica spanning nodes
    is one pipeline stage: it loads its stage's share of the checkpoint, beside the others."""
    gpus = tensor_parallel
    warm_adapters = sum(sorted((a.bytes for a in lora.adapters), reverse=True)[: lora.max_cpu_loras])
    all_adapters = sum(a.bytes for a in lora.adapters)
    return PodPlan(
        cpu=2.0 if placement == "cpu" else float(max(4, 4 * gpus)),
        memory_bytes=_gib_ceil((8 if placement == "cpu" else 16 * gpus) * 2**30 + warm_adapters),
        # NCCL between the tensor-parallel workers goes through /dev/shm.
        shm_bytes=(4 * gpus if gpus > 1 else 1) * 2**30,
        download_bytes=download_bytes,
        # The checkpoint plus the tokenizer, config and headroom.
        model_cache_bytes=_gib_ceil(download_bytes * 1.15 + 2**30),
        adapter_store_bytes=_gib_ceil(all_adapters * 1.2 + 2**28),
        startup_seconds=STARTUP_BASE_SECONDS
        + STARTUP_SECONDS_PER_GIB * math.ceil(download_bytes / pipeline_parallel / 2**30),
        populate_seconds=POPULATE_BASE_SECONDS
        + POPULATE_SECONDS_PER_GIB * math.ceil((download_bytes + all_adapters) / 2**30),
    )


def refuse_cache_claims_across_nodes(
    access_mode: ModelCacheAccessMode, engines: tuple[EnginePlan, ...], pools: tuple[PoolPlan, ...], notes: Notes
) -> None:
    """A ReadWriteOnce claim attaches to one node at a time: replicas that can land on two nodes would wait
    forever for their weights (a multi-attach error), so the plan refuses them rather than deploy them
    (docs/decisions.md: Cache claims are ReadWriteOnce unless the spec says otherwise)."""
    if access_mode != "ReadWriteOnce":
        return
    nodes = {p.name: p.nodes for p in pools}
    for index, engine in enumerate(engines):
        if engine.pipeline_parallel > 1:
            notes.about_engine(index, engine.name).refuse(
                "placement.pipeline_parallel",
                f"each replica spans {engine.pipeline_parallel} nodes, and every stage mounts the cache claim "
                "that one node at a time can mount when ReadWriteOnce; set platform.model_cache.access_mode to "
                "ReadWriteMany with a StorageClass that offers it (platform.model_cache.storage_class)",
            )
        elif engine.most_replicas > 1 and nodes.get(engine.pool, 1) > 1:
            notes.about_engine(index, engine.name).refuse(
                "autoscaling.max_replicas" if engine.autoscaling else "replicas",
                f"{engine.most_replicas} replicas on pool {engine.pool} of {nodes[engine.pool]} nodes would share a "
                "ReadWriteOnce cache claim, which one node at a time can mount; set platform.model_cache.access_mode "
                "to ReadWriteMany with a StorageClass that offers it (platform.model_cache.storage_class)",
            )


def warn_read_write_many_on_the_default_class(access_mode: ModelCacheAccessMode, storage_class: str | None,
                                              notes: Notes) -> None:
    """ReadWriteMany needs a file store; the default StorageClass of a managed cluster is block storage
    (docs/decisions.md: Cache claims are ReadWriteOnce unless the spec says otherwise)."""
    if access_mode == "ReadWriteMany" and storage_class is None:
        notes.warn("platform.model_cache.storage_class",
                   "not set while access_mode is ReadWriteMany: the cache claims use the cluster's default "
                   "StorageClass, which must offer ReadWriteMany (block storage such as EBS, Persistent Disk or "
                   "Azure Disk does not, and the claims would stay Pending)")
