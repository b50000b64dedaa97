"""Checks that span fields: names that must resolve, against each other and
against the catalog. Every problem is collected, none stops the others.

Capacity (does it fit?) is not checked here: that is the planner's verdict.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable

from tenantry.catalog.gpus import GPU_TYPES, GpuType, place_mig_layout, valid_mig_layouts
from tenantry.catalog.models import CATALOG_MODELS
from tenantry.findings import Loc, path_str
from tenantry.spec.resolve import engine_max_context, resolve_model
from tenantry.spec.schema import TIERS, EngineSpec, NodePoolSpec, PlacementSpec, Spec

Problem = tuple[Loc, str]


def suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _listing(names: Iterable[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:12])
    return shown + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def _duplicates(names: list[str], loc: Loc, kind: str) -> list[Problem]:
    first: dict[str, int] = {}
    problems = []
    for i, name in enumerate(names):
        if name in first:
            problems.append(((*loc, i, "name"), f"{kind} name '{name}' is already used by {loc[-1]}[{first[name]}]"))
        else:
            first[name] = i
    return problems


def check_references(spec: Spec) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_pools(spec)
    problems += _check_engines(spec)
    problems += _check_tenants(spec)
    problems += _check_tiers(spec)
    problems += _check_gateway(spec)
    return problems


def _check_pools(spec: Spec) -> list[Problem]:
    pools = spec.cluster.node_pools
    loc: Loc = ("cluster", "node_pools")
    problems = _duplicates([p.name for p in pools], loc, "pool")
    node_owner: dict[str, str] = {}
    for i, pool in enumerate(pools):
        if pool.node_names is not None:
            if len(pool.node_names) != pool.nodes:
                problems.append(
                    ((*loc, i, "node_names"), f"lists {len(pool.node_names)} nodes but the pool has nodes: {pool.nodes}")
                )
            for j, node in enumerate(pool.node_names):
                if node in node_owner:
                    problems.append(((*loc, i, "node_names", j), f"node '{node}' is already in pool '{node_owner[node]}'"))
                node_owner.setdefault(node, pool.name)
        gpu = GPU_TYPES.get(pool.gpu)
        if gpu is None:
            problems.append(
                ((*loc, i, "gpu"), f"unknown GPU type '{pool.gpu}'{suggest(pool.gpu, GPU_TYPES)}; "
                 f"the catalog has {_listing(GPU_TYPES)}")
            )
            continue
        if pool.mig_layout is not None:
            problems += _check_mig_layout(gpu, pool.mig_layout, (*loc, i, "mig_layout"))
    return problems


def _check_mig_layout(gpu: GpuType, layout: list[str], loc: Loc) -> list[Problem]:
    if not gpu.mig_capable:
        return [(loc, f"{gpu.name} does not support MIG; remove mig_layout to use whole GPUs")]
    offered = [p.name for p in gpu.mig_profiles]
    problems = [
        ((*loc, j), f"'{name}' is not a MIG profile of {gpu.name}{suggest(name, offered)}; it offers {', '.join(offered)}")
        for j, name in enumerate(layout)
        if gpu.mig_profile(name) is None
    ]
    if problems:
        return problems
    if place_mig_layout(gpu, tuple(layout)) is None:
        used = set(layout)
        hints = [lay for lay in valid_mig_layouts(gpu.name) if used <= set(lay)][:3]
        hint = "; layouts with these profiles that fit: " + "; ".join("[" + ", ".join(h) + "]" for h in hints) if hints else ""
        compute = sum(gpu.mig_profile(n).compute_slices for n in layout)  # type: ignore[union-attr]
        memory = sum(gpu.mig_profile(n).memory_slices for n in layout)  # type: ignore[union-attr]
        problems.append(
            (loc, f"[{', '.join(layout)}] cannot be carved from one {gpu.name} ({compute}/7 compute and "
             f"{memory}/8 memory slices, placed as NVIDIA's placement rules allow){hint}")
        )
    return problems


def _check_engines(spec: Spec) -> list[Problem]:
    problems: list[Problem] = []
    pools: dict[str, NodePoolSpec] = {}
    for p in spec.cluster.node_pools:
        pools.setdefault(p.name, p)  # a duplicate is reported once, not resolved to the wrong pool
    tenants = {t.name for t in spec.tenants}
    engines = spec.engines
    problems += _duplicates([e.name for e in engines], ("engines",), "engine")
    engine_names = {e.name for e in engines}
    seen_adapters: dict[str, str] = {}
    for i, engine in enumerate(engines):
        loc: Loc = ("engines", i)
        if engine.architecture is None and engine.model not in CATALOG_MODELS:
            problems.append(
                ((*loc, "model"), f"'{engine.model}' is not in the catalog{suggest(engine.model, CATALOG_MODELS)}; "
                 f"use one of {_listing(CATALOG_MODELS)} or describe it under `architecture`")
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
        resolved = resolve_model(engine)
        arch = resolved.architecture if resolved else None
        if engine.weights == "int4-awq" and engine.source is None:
            problems.append(
                ((*loc, "source"), f"int4-awq needs an AWQ checkpoint; the catalog's {engine.model} source is bf16: "
                 "set source (and revision) to the quantised weights")
            )

        placement_loc: Loc = (*loc, "placement")
        pool = pools.get(engine.placement.pool)
        if pool is None:
            problems.append(
                ((*placement_loc, "pool"), f"no node pool named '{engine.placement.pool}'"
                 f"{suggest(engine.placement.pool, pools)}; pools: {_listing(pools)}")
            )
        elif pool.gpu in GPU_TYPES:
            problems += _check_placement(engine.placement, pool, placement_loc)

        tp = engine.placement.tensor_parallel
        if arch is not None:
            if arch.attention_heads % tp:
                problems.append(
                    ((*placement_loc, "tensor_parallel"), f"{engine.model} has {arch.attention_heads} attention heads, "
                     f"which tensor_parallel {tp} does not divide (vLLM needs an equal share per GPU)")
                )
            elif arch.kv_heads % tp and tp % arch.kv_heads:
                problems.append(
                    ((*placement_loc, "tensor_parallel"), f"{engine.model} has {arch.kv_heads} KV heads; tensor_parallel "
                     f"{tp} must divide them or be a multiple of them")
                )
            if engine.max_context is not None and engine.max_context > arch.max_context:
                problems.append(
                    ((*loc, "max_context"), f"{engine.max_context} exceeds the {arch.max_context} tokens "
                     f"{engine.model} supports")
                )
        if engine.runtime_reserve_fraction >= engine.gpu_memory_utilization:
            problems.append(
                ((*loc, "runtime_reserve_fraction"), f"{engine.runtime_reserve_fraction} leaves nothing of the "
                 f"{engine.gpu_memory_utilization} gpu_memory_utilization for weights and KV cache")
            )
        if engine.lora.max_loras is not None and not engine.adapters:
            problems.append(((*loc, "lora", "max_loras"), "set, but the engine serves no adapters"))

        for j, adapter in enumerate(engine.adapters):
            aloc: Loc = (*loc, "adapters", j)
            if adapter.name in engine_names:
                problems.append(((*aloc, "name"), f"'{adapter.name}' is also an engine name; tenants request both by name"))
            if adapter.name in seen_adapters:
                problems.append(((*aloc, "name"), f"adapter name '{adapter.name}' is already used at {seen_adapters[adapter.name]}"))
            else:
                seen_adapters[adapter.name] = path_str(aloc)
            if adapter.base_model != engine.model:
                problems.append(
                    ((*aloc, "base_model"), f"adapter '{adapter.name}' was trained on '{adapter.base_model}' but engine "
                     f"'{engine.name}' serves '{engine.model}'; an adapter on another base produces silent garbage")
                )
            elif resolved is not None and adapter.base_revision != resolved.revision:
                problems.append(
                    ((*aloc, "base_revision"), f"adapter '{adapter.name}' was trained on {engine.model} revision "
                     f"'{adapter.base_revision}' but engine '{engine.name}' serves revision '{resolved.revision}'")
                )
            if adapter.tenant not in tenants:
                problems.append(
                    ((*aloc, "tenant"), f"no tenant named '{adapter.tenant}'{suggest(adapter.tenant, tenants)}")
                )
            if adapter.source.startswith("hf://") and "@" not in adapter.source:
                problems.append(
                    ((*aloc, "source"), f"pin the revision: {adapter.source}@<commit> (a Hub repository moves over time)")
                )
            dupes = [m for m, n in Counter(adapter.target_modules).items() if n > 1]
            if dupes:
                problems.append(((*aloc, "target_modules"), f"lists {', '.join(dupes)} more than once"))
    return problems


def _check_placement(placement: PlacementSpec, pool: NodePoolSpec, loc: Loc) -> list[Problem]:
    gpu = GPU_TYPES[pool.gpu]
    tp = placement.tensor_parallel
    problems: list[Problem] = []
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


def _check_tenants(spec: Spec) -> list[Problem]:
    problems = _duplicates([t.name for t in spec.tenants], ("tenants",), "tenant")
    engines: dict[str, EngineSpec] = {}
    for e in spec.engines:
        engines.setdefault(e.name, e)
    adapter_owner: dict[str, str] = {}
    adapter_engine: dict[str, str] = {}
    for engine in spec.engines:
        for adapter in engine.adapters:
            adapter_owner.setdefault(adapter.name, adapter.tenant)
            adapter_engine.setdefault(adapter.name, engine.name)
    own_salts: dict[str, str] = {}
    group_salts = {f"group-{t.cache.group}" for t in spec.tenants if t.cache.group}

    for i, tenant in enumerate(spec.tenants):
        loc: Loc = ("tenants", i)
        if not tenant.models and not tenant.adapters:
            problems.append(((*loc, "models"), "the tenant may call nothing: list at least one engine or adapter"))
        for j, model in enumerate(tenant.models):
            if model in engines:
                continue
            if model in adapter_owner:
                problems.append(((*loc, "models", j), f"'{model}' is a LoRA adapter; list it under adapters"))
            else:
                problems.append(
                    ((*loc, "models", j), f"'{model}' is not served by any engine{suggest(model, engines)}; "
                     f"engines: {_listing(engines)}")
                )
        for j, name in enumerate(tenant.adapters):
            owner = adapter_owner.get(name)
            if owner is None:
                hint = "; it is an engine, list it under models" if name in engines else suggest(name, adapter_owner)
                problems.append(((*loc, "adapters", j), f"no engine serves an adapter named '{name}'{hint}"))
            elif owner != tenant.name:
                problems.append(
                    ((*loc, "adapters", j), f"adapter '{name}' belongs to tenant '{owner}'; a tenant may only use its own adapters")
                )
        for key, values in (("models", tenant.models), ("adapters", tenant.adapters)):
            for name, count in Counter(values).items():
                if count > 1:
                    problems.append(((*loc, key), f"lists '{name}' {count} times"))

        allowed = list(dict.fromkeys(tenant.models + tenant.adapters))
        targets = allowed
        if tenant.traffic is not None:
            targets = [share.target for share in tenant.traffic]
            for j, share in enumerate(tenant.traffic):
                if share.target not in allowed:
                    problems.append(
                        ((*loc, "traffic", j, "target"), f"'{share.target}' is not among the tenant's models or adapters"
                         f"{suggest(share.target, allowed)}")
                    )
            for name, count in Counter(targets).items():
                if count > 1:
                    problems.append(((*loc, "traffic"), f"'{name}' appears {count} times; give it one share"))
            total = sum(share.share for share in tenant.traffic)
            if abs(total - 1.0) > 1e-6:
                problems.append(((*loc, "traffic"), f"shares must sum to 1, they sum to {total:g}"))

        needed = tenant.typical.prompt_tokens + tenant.typical.output_tokens
        names = {adapter_engine.get(t, t) for t in targets}
        for engine in (engines[n] for n in sorted(names) if n in engines):
            resolved = resolve_model(engine)
            if resolved is None:
                continue
            limit = engine_max_context(engine, resolved.architecture)
            if needed > limit:
                problems.append(
                    ((*loc, "typical"), f"a typical request ({tenant.typical.prompt_tokens} + "
                     f"{tenant.typical.output_tokens} = {needed} tokens) exceeds engine '{engine.name}''s "
                     f"max_context of {limit}")
                )

        if tenant.cache.isolation == "own":
            salt = tenant.cache.salt or f"tenant-{tenant.name}"
            if salt in own_salts:
                problems.append(
                    ((*loc, "cache", "salt"), f"'{salt}' is also tenant '{own_salts[salt]}''s own salt; tenants that "
                     "should share a cache belong in a shared group")
                )
            elif salt in group_salts:
                problems.append(((*loc, "cache", "salt"), f"'{salt}' is the salt of a shared cache group"))
            own_salts.setdefault(salt, tenant.name)
    return problems


def _check_tiers(spec: Spec) -> list[Problem]:
    priorities = [spec.tiers.policy(t).priority for t in TIERS]
    if not priorities[0] < priorities[1] < priorities[2]:
        return [
            (("tiers",), "priorities must rise from guaranteed to best-effort to spot (lower runs first), got "
             + ", ".join(f"{t} {p}" for t, p in zip(TIERS, priorities, strict=True)))
        ]
    return []


def _check_gateway(spec: Spec) -> list[Problem]:
    problems: list[Problem] = []
    engines = {e.name for e in spec.engines}
    seen: set[str] = set()
    for i, fallback in enumerate(spec.gateway.fallbacks):
        loc: Loc = ("gateway", "fallbacks", i)
        if fallback.model not in engines:
            problems.append(((*loc, "model"), f"no engine named '{fallback.model}'{suggest(fallback.model, engines)}"))
        if fallback.model in seen:
            problems.append(((*loc, "model"), f"'{fallback.model}' already has a fallback entry; merge them"))
        seen.add(fallback.model)
        for j, target in enumerate(fallback.to):
            if target == fallback.model:
                problems.append(((*loc, "to", j), f"'{target}' cannot fall back to itself"))
            elif target not in engines:
                problems.append(((*loc, "to", j), f"no engine named '{target}'{suggest(target, engines)}"))
    admission = spec.gateway.admission
    if admission.shed_spot_at_kv_usage > admission.shed_best_effort_at_kv_usage:
        problems.append(
            (("gateway", "admission", "shed_spot_at_kv_usage"), "must not exceed shed_best_effort_at_kv_usage: spot is shed first")
        )
    if admission.shed_spot_at_waiting > admission.shed_best_effort_at_waiting:
        problems.append(
            (("gateway", "admission", "shed_spot_at_waiting"), "must not exceed shed_best_effort_at_waiting: spot is shed first")
        )
    return problems
