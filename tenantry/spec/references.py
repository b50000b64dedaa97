"""Checks that span fields: names that must resolve, against each other and
against the catalog. Every problem is collected, none stops the others.
Engines are checked in engine_checks.py, tenants in tenant_checks.py; pools,
tiers and the gateway here, object-storage identity in identity_checks.py.

Capacity (does it fit?) is not checked here: that is the planner's verdict.
"""

from __future__ import annotations

from croniter import croniter
from croniter.croniter import CroniterError

from tenantry.catalog.gpus import GPU_TYPES, GpuType, place_mig_layout, valid_mig_layouts
from tenantry.findings import Loc
from tenantry.spec.engine_checks import check_engines
from tenantry.spec.cluster import MANAGED_METRICS_API
from tenantry.spec.identity_checks import check_cloud_identity
from tenantry.spec.problems import Problem, duplicates, listing, suggest
from tenantry.spec.schema import TIERS, Spec
from tenantry.spec.tenant_checks import check_tenants

__all__ = ["Problem", "check_references", "suggest"]


def check_references(spec: Spec) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_pools(spec)
    problems += check_engines(spec)
    problems += check_tenants(spec)
    problems += _check_tiers(spec)
    problems += _check_gateway(spec)
    problems += check_cloud_identity(spec)
    problems += _check_metrics_api(spec)
    problems += _check_runbook_links(spec)
    problems += _check_backup_schedule(spec)
    return problems


def _check_pools(spec: Spec) -> list[Problem]:
    pools = spec.cluster.node_pools
    loc: Loc = ("cluster", "node_pools")
    problems = duplicates([p.name for p in pools], loc, "pool")
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
                 f"the catalog has {listing(GPU_TYPES)}")
            )
            continue
        if pool.mig_layout is not None:
            problems += _check_mig_layout(gpu, pool.mig_layout, (*loc, i, "mig_layout"))
    return problems


def _check_metrics_api(spec: Spec) -> list[Problem]:
    """A second metrics-server would contend for the one APIService v1beta1.metrics.k8s.io
    (docs/decisions.md: The gateway's autoscaler reads metrics-server)."""
    cluster = spec.cluster
    if cluster.metrics_api == "install" and cluster.environment in MANAGED_METRICS_API:
        return [(("cluster", "metrics_api"), f"install on {cluster.environment}, whose clusters run their own "
                 "metrics-server: a second would contend for the APIService v1beta1.metrics.k8s.io; use present")]
    return []


def _check_backup_schedule(spec: Spec) -> list[Problem]:
    """CloudNativePG reads the schedule as Go's cron with seconds first; the Plan reads it to know when a backup is
    late (tenantry/plan/build.py: longest_gap_seconds)."""
    schedule = spec.platform.postgres.backup_schedule
    try:
        croniter(schedule, second_at_beginning=True)
    except (CroniterError, ValueError) as error:
        return [(("platform", "postgres", "backup_schedule"), f"'{schedule}' is not a schedule: six fields, seconds "
                 f"first, as '0 0 3 * * *' (03:00 every day) ({type(error).__name__})")]
    return []


def _check_runbook_links(spec: Spec) -> list[Problem]:
    """An alert's runbook_url is read from a pager: on a stack with GPU pools, which only a cluster runs, a path
    relative to the repository is not a link anyone can open there. A CPU-only stack (the local stack) may keep the
    repository's path, where its alerts are read beside the checkout."""
    url = spec.platform.runbook_base_url
    on_gpus = [p.name for p in spec.cluster.node_pools if p.gpu != "CPU"]
    if on_gpus and not url.startswith(("https://", "http://")):
        return [(("platform", "runbook_base_url"), f"'{url}' is not a link: pool {on_gpus[0]} has GPUs, so this stack "
                 "runs on a cluster, where each alert's runbook_url is opened from a pager; give the absolute URL the "
                 "runbooks are published at (https://...)")]
    return []


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
