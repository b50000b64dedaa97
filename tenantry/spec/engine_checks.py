"""Cross-field checks of the engines: a model that resolves, a placement its pool allows, a shape
tensor parallelism can split, and adapters trained on the engine's base and owned by a tenant."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tenantry.catalog.gpus import GPU_TYPES
from tenantry.catalog.models import CATALOG_MODELS, Architecture
from tenantry.findings import Loc, path_str
from tenantry.spec.problems import Problem, duplicates, listing, suggest
from tenantry.spec.resolve import ResolvedModel, resolve_model
from tenantry.spec.schema import AdapterSpec, EngineSpec, NodePoolSpec, PlacementSpec, Spec


def check_engines(spec: Spec) -> list[Problem]:
    pools: dict[str, NodePoolSpec] = {}
    for p in spec.cluster.node_pools:
        pools.setdefault(p.name, p)  # a duplicate is reported once, not resolved to the wrong pool
    names = _AdapterNames(
        engines={e.name for e in spec.engines}, tenants={t.name for t in spec.tenants}, seen={}
    )
    problems = duplicates([e.name for e in spec.engines], ("engines",), "engine")
    for i, engine in enumerate(spec.engines):
        loc: Loc = ("engines", i)
        resolved = resolve_model(engine)
        problems += _check_model(engine, loc)
        problems += _check_pool(engine, pools, loc)
        if resolved is not None:
            problems += _check_shape(engine, resolved.architecture, loc)
        problems += _check_memory_settings(engine, loc)
        for j, adapter in enumerate(engine.adapters):
            problems += _check_adapter(adapter, engine, resolved, (*loc, "adapters", j), names)
    return problems


def _check_model(engine: EngineSpec, loc: Loc) -> list[Problem]:
    """A catalog model, or one described under `architecture` with its own pinned revision and source."""
    problems: list[Problem] = []
    if engine.architecture is None and engine.model not in CATALOG_MODELS:
        problems.append(
            ((*loc, "model"), f"'{engine.model}' is not in the catalog{suggest(engine.model, CATALOG_MODELS)}; "
             f"use one of {listing(CATALOG_MODELS)} or describe it under `architecture`")
        )
    entry = CATALOG_MODELS.get(engine.model)
    if engine.architecture is None and entry is not None and entry.revision is None and engine.revision is None:
        problems.append(
            ((*loc, "revision"), f"required for {engine.model}: tenantry's catalog knows its shape but pins no "
             f"commit of {entry.source}; pin the one you fetch (a commit id or a release tag)")
        )
    if engine.architecture is not None:
        if engine.model in CATALOG_MODELS:
            problems.append(
                ((*loc, "architecture"), f"'{engine.model}' is a catalog model; remove `architecture` or give "
                 "your model a name of its own")
            )
        for key in ("revision", "source"):
            if getattr(engine, key) is None:
                problems.append(((*loc, key), f"required with `architecture` (a model outside the catalog has no pinned {key})"))
    if engine.weights == "int4-awq" and engine.source is None:
        problems.append(
            ((*loc, "source"), f"int4-awq needs an AWQ checkpoint; the catalog's {engine.model} source is bf16: "
             "set source (and revision) to the quantised weights")
        )
    return problems


def _check_pool(engine: EngineSpec, pools: dict[str, NodePoolSpec], loc: Loc) -> list[Problem]:
    placement_loc: Loc = (*loc, "placement")
    pool = pools.get(engine.placement.pool)
    if pool is None:
        return [
            ((*placement_loc, "pool"), f"no node pool named '{engine.placement.pool}'"
             f"{suggest(engine.placement.pool, pools)}; pools: {listing(pools)}")
        ]
    if pool.gpu in GPU_TYPES:
        return _check_placement(engine.placement, pool, placement_loc)
    return []


def _check_shape(engine: EngineSpec, arch: Architecture, loc: Loc) -> list[Problem]:
    """Tensor parallelism must split the model's heads evenly; the context must be one the model supports."""
    problems: list[Problem] = []
    tp = engine.placement.tensor_parallel
    tp_loc: Loc = (*loc, "placement", "tensor_parallel")
    if arch.attention_heads % tp:
        problems.append(
            (tp_loc, f"{engine.model} has {arch.attention_heads} attention heads, "
             f"which tensor_parallel {tp} does not divide (vLLM needs an equal share per GPU)")
        )
    elif arch.kv_heads % tp and tp % arch.kv_heads:
        problems.append(
            (tp_loc, f"{engine.model} has {arch.kv_heads} KV heads; tensor_parallel "
             f"{tp} must divide them or be a multiple of them")
        )
    pp = engine.placement.pipeline_parallel
    if pp > arch.layers:
        problems.append(
            ((*loc, "placement", "pipeline_parallel"), f"{engine.model} has {arch.layers} layers; {pp} pipeline "
             "stages would leave some without one (vLLM gives each stage a share of the layers)")
        )
    if engine.max_context is not None and engine.max_context > arch.max_context:
        problems.append(
            ((*loc, "max_context"), f"{engine.max_context} exceeds the {arch.max_context} tokens "
             f"{engine.model} supports")
        )
    return problems


def _check_memory_settings(engine: EngineSpec, loc: Loc) -> list[Problem]:
    problems: list[Problem] = []
    if engine.runtime_reserve_fraction >= engine.gpu_memory_utilization:
        problems.append(
            ((*loc, "runtime_reserve_fraction"), f"{engine.runtime_reserve_fraction} leaves nothing of the "
             f"{engine.gpu_memory_utilization} gpu_memory_utilization for weights and KV cache")
        )
    if engine.lora.max_loras is not None and not engine.adapters:
        problems.append(((*loc, "lora", "max_loras"), "set, but the engine serves no adapters"))
    return problems


@dataclass(frozen=True, kw_only=True)
class _AdapterNames:
    engines: set[str]
    tenants: set[str]
    seen: dict[str, str]
    """Adapter names already checked, and the path where each was first seen."""


def _check_adapter(
    adapter: AdapterSpec, engine: EngineSpec, resolved: ResolvedModel | None, loc: Loc, names: _AdapterNames
) -> list[Problem]:
    problems: list[Problem] = []
    if adapter.name in names.engines:
        problems.append(((*loc, "name"), f"'{adapter.name}' is also an engine name; tenants request both by name"))
    if adapter.name in names.seen:
        problems.append(((*loc, "name"), f"adapter name '{adapter.name}' is already used at {names.seen[adapter.name]}"))
    else:
        names.seen[adapter.name] = path_str(loc)
    if adapter.base_model != engine.model:
        problems.append(
            ((*loc, "base_model"), f"adapter '{adapter.name}' was trained on '{adapter.base_model}' but engine "
             f"'{engine.name}' serves '{engine.model}'; an adapter on another base produces silent garbage")
        )
    elif resolved is not None and adapter.base_revision != resolved.revision:
        problems.append(
            ((*loc, "base_revision"), f"adapter '{adapter.name}' was trained on {engine.model} revision "
             f"'{adapter.base_revision}' but engine '{engine.name}' serves revision '{resolved.revision}'")
        )
    if adapter.tenant not in names.tenants:
        problems.append(
            ((*loc, "tenant"), f"no tenant named '{adapter.tenant}'{suggest(adapter.tenant, names.tenants)}")
        )
    if adapter.source.startswith("hf://") and "@" not in adapter.source:
        problems.append(
            ((*loc, "source"), f"pin the revision: {adapter.source}@<commit> (a Hub repository moves over time)")
        )
    dupes = [m for m, n in Counter(adapter.target_modules).items() if n > 1]
    if dupes:
        problems.append(((*loc, "target_modules"), f"lists {', '.join(dupes)} more than once"))
    return problems


def _check_placement(placement: PlacementSpec, pool: NodePoolSpec, loc: Loc) -> list[Problem]:
    gpu = GPU_TYPES[pool.gpu]
    tp = placement.tensor_parallel
    problems = _check_pipeline(placement, pool, loc)
    if pool.mig_layout is not None:
        if tp > 1:
            problems.append(
                ((*loc, "tensor_parallel"), f"pool '{pool.name}' is carved into MIG slices and tensor parallelism "
                 "cannot span MIG slices (vLLM runs one process per slice, and MIG disables NVLink); "
                 "place this engine on a whole-GPU pool")
            )
        if placement.mig_profile is None:
            problems.append(
                ((*loc, "mig_profile"), f"pool '{pool.name}' is a MIG pool; choose one of its profiles: "
                 f"{', '.join(sorted(set(pool.mig_layout)))}")
            )
        elif gpu.mig_profile(placement.mig_profile) is None:
            offered = [p.name for p in gpu.mig_profiles]
            problems.append(
                ((*loc, "mig_profile"), f"'{placement.mig_profile}' is not a MIG profile of {gpu.name}"
                 f"{suggest(placement.mig_profile, offered)}")
            )
        elif placement.mig_profile not in pool.mig_layout:
            problems.append(
                ((*loc, "mig_profile"), f"pool '{pool.name}' carves {', '.join(sorted(set(pool.mig_layout)))}, "
                 f"not {placement.mig_profile}")
            )
    else:
        if placement.mig_profile is not None:
            problems.append(
                ((*loc, "mig_profile"), f"pool '{pool.name}' has whole GPUs (no mig_layout); remove mig_profile "
                 "or place the engine on a MIG pool")
            )
        if tp > pool.gpus_per_node or pool.gpus_per_node % tp:
            problems.append(
                ((*loc, "tensor_parallel"), f"{tp} does not divide the {pool.gpus_per_node} GPUs of a node in pool "
                 f"'{pool.name}' (a tensor-parallel group must stay inside one node)")
            )
    return problems


def _check_pipeline(placement: PlacementSpec, pool: NodePoolSpec, loc: Loc) -> list[Problem]:
    """A replica over several nodes (pipeline_parallel) takes whole nodes of whole GPUs: one stage per node, its
    tensor-parallel group the node's GPUs, as vLLM's multi-node serving runs it (Ray places a stage's workers
    on one node; NVLink joins them, the slower network only the stages)."""
    pp, tp = placement.pipeline_parallel, placement.tensor_parallel
    if pp == 1:
        return []
    here: Loc = (*loc, "pipeline_parallel")
    if pool.mig_layout is not None:
        return [(here, f"pool '{pool.name}' is carved into MIG slices; a replica spanning nodes needs whole GPUs "
                 "(vLLM runs one process per slice, with no NCCL between slices): use a whole-GPU pool")]
    if pool.gpu == "CPU":
        return [(here, f"pool '{pool.name}' is the local stack's CPU: it runs one engine process per engine, on "
                 "one machine; pipeline_parallel must be 1")]
    problems: list[Problem] = []
    if tp != pool.gpus_per_node:
        problems.append(
            ((*loc, "tensor_parallel"), f"{tp}, but a replica spanning {pp} nodes takes whole nodes: set it to the "
             f"{pool.gpus_per_node} GPUs of a node in pool '{pool.name}' (a stage smaller than a node would share "
             "it with another stage, or another engine, over PCIe and the network instead of NVLink)")
        )
    if pp > pool.nodes:
        problems.append(
            (here, f"{pp} nodes per replica, but pool '{pool.name}' has {pool.nodes}")
        )
    return problems
