"""plan(spec) -> Plan: every number decided once, every refusal listed.

Pure: no files, no network, no clocks. The spec has already passed
validation (tenantry.spec), so every name here resolves; what can still go
wrong is capacity, and each such problem becomes a refusal with the path of
the field to change. Engines are planned first (engines.py), then the pools
they are placed on (placement.py), then tenants (tenants.py), whose reserved
slots come from the engines.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timezone

from croniter import croniter

from tenantry.catalog.gpus import gpu_resources
from tenantry.plan.cluster import plan_cluster
from tenantry.plan.engines import plan_engine
from tenantry.plan.isolation import plan_isolation
from tenantry.plan.model import CloudIdentityPlan, EnginePlan, FallbackPlan, GatewayPlan, Plan, PlatformPlan
from tenantry.plan.notes import Notes
from tenantry.plan.placement import plan_pool
from tenantry.plan.pod import refuse_cache_claims_across_nodes, warn_read_write_many_on_the_default_class
from tenantry.plan.routes import group_routes, routes
from tenantry.plan.tenants import FallbackGraph, plan_tenant, warn_guarantees_for_most
from tenantry.spec.identity_checks import bucket_schemes
from tenantry.spec.schema import TIERS, Spec

SCHEDULE_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
"""Where a schedule's runs are counted from: a fixed day, so the Plan reads no clock."""


def plan(spec: Spec, stack: str) -> Plan:
    notes = Notes()
    found = routes(spec)
    by_engine = group_routes(found, by="engine")
    by_tenant = group_routes(found, by="tenant")
    fallback_targets = {t for f in spec.gateway.fallbacks for t in f.to}

    engines = tuple(
        plan_engine(engine, spec, by_engine[engine.name], engine.name in fallback_targets,
                    notes.about_engine(i, engine.name))
        for i, engine in enumerate(spec.engines)
    )
    pools = tuple(plan_pool(i, pool, engines, notes) for i, pool in enumerate(spec.cluster.node_pools))
    engines, pools = plan_isolation(spec, engines, pools, notes)
    cluster = plan_cluster(spec, notes)
    platform = _plan_platform(spec)
    refuse_cache_claims_across_nodes(platform.model_cache_access_mode, engines, pools, notes)
    warn_read_write_many_on_the_default_class(platform.model_cache_access_mode, platform.model_cache_storage_class, notes)
    reserved = _reserved_slots(engines)
    fallbacks = FallbackGraph.of(spec)
    pool_gpus = gpu_resources(p.gpu for p in spec.cluster.node_pools)
    tenants = tuple(plan_tenant(spec, t, by_tenant[t.name], reserved[t.name], fallbacks, pool_gpus)
                    for t in spec.tenants)
    warn_guarantees_for_most(spec, notes)
    if spec.gateway.replicas < 2:
        notes.warn("gateway.replicas", "one gateway replica: every request fails while it restarts")
    if spec.platform.postgres.backup_destination is None:
        notes.warn("platform.postgres.backup_destination", "not set: keys, budgets and spend are not backed up")

    return Plan(
        stack=stack,
        description=spec.description,
        kubernetes_version=spec.cluster.kubernetes_version,
        mig_strategy="mixed" if any(p.mig_layout for p in spec.cluster.node_pools) else "none",
        cluster=cluster,
        pools=pools,
        engines=engines,
        tenants=tenants,
        gateway=_plan_gateway(spec, engines),
        platform=platform,
        refusals=tuple(notes.refusals),
        warnings=tuple(notes.warnings),
    )


def _reserved_slots(engines: tuple[EnginePlan, ...]) -> dict[str, int]:
    """Each tenant's reserved slots, summed over the engines it reaches."""
    reserved: dict[str, int] = defaultdict(int)
    for engine_plan in engines:
        for reservation in engine_plan.slots.reserved:
            reserved[reservation.tenant] += reservation.slots
    return reserved


def _plan_gateway(spec: Spec, engines: tuple[EnginePlan, ...]) -> GatewayPlan:
    admission = spec.gateway.admission
    longest_context = max((e.kv.max_context for e in engines), default=0)
    adapters_of = {e.name: tuple(a.name for a in e.adapters) for e in spec.engines}
    max_request_bytes = REQUEST_BYTES_PER_TOKEN * longest_context + REQUEST_BYTES_BESIDE_THE_PROMPT
    return GatewayPlan(
        replicas=spec.gateway.replicas,
        fallbacks=tuple(
            FallbackPlan(model=f.model, to=tuple(f.to),
                         adapters=adapters_of.get(f.model, ()) if f.include_adapters else ())
            for f in spec.gateway.fallbacks
        ),
        tier_priorities=tuple((tier, spec.tiers.policy(tier).priority) for tier in TIERS),
        shed_spot_at_kv_usage=admission.shed_spot_at_kv_usage,
        shed_best_effort_at_kv_usage=admission.shed_best_effort_at_kv_usage,
        shed_spot_at_waiting=admission.shed_spot_at_waiting,
        shed_best_effort_at_waiting=admission.shed_best_effort_at_waiting,
        metrics_max_age_seconds=admission.metrics_max_age_seconds,
        engine_scrape_interval_seconds=engine_scrape_interval(admission.metrics_max_age_seconds),
        wait_at_concurrency_limit_seconds=admission.wait_at_concurrency_limit_ms / 1000,
        spot_pause_after_others_seconds=admission.spot_pause_after_others_seconds,
        # Room for three times the steady replicas (docs/decisions.md: Gateway autoscaling ceiling).
        max_replicas=max(3 * spec.gateway.replicas, 2),
        # No stream can hold this many chunks: LiteLLM's loop guard never ends one
        # (docs/decisions.md: The gateway does not cut a repeating stream).
        repeated_chunk_limit=longest_context + 1,
        max_request_bytes=max_request_bytes,
        request_read_seconds=float(max(REQUEST_READ_FLOOR_SECONDS, round(max_request_bytes / SLOWEST_UPLOAD_BYTES_PER_SECOND))),
        spend_write_seconds=SPEND_WRITE_SECONDS,
    )


SPEND_WRITE_SECONDS = 2
"""LiteLLM's default is 10 s; a replica killed mid-run loses the spend of its last interval (docs/decisions.md:
Every gate run reconciles spend), and a write every 2 s per replica is a handful of upserts a second."""


REQUEST_BYTES_PER_TOKEN = 32
REQUEST_BYTES_BESIDE_THE_PROMPT = 64 * 1024
"""The gateway's request size limit (GatewayPlan.max_request_bytes)."""
SLOWEST_UPLOAD_BYTES_PER_SECOND = 64 * 1024
REQUEST_READ_FLOOR_SECONDS = 10
"""The time a request's body has to arrive (GatewayPlan.request_read_seconds)."""

ENGINE_SCRAPE_CEILING_SECONDS = 15
"""kube-prometheus-stack's usual interval: engines are never scraped less often."""


def engine_scrape_interval(metrics_max_age_seconds: float) -> int:
    """Whole seconds, at most half the oldest sample admission may act on: a sample
    is then at most one interval (plus the scrape's own time) old when read, and one
    missed scrape still leaves it young enough (docs/decisions.md: Engines are scraped
    at half the metrics' maximum age)."""
    return max(1, min(ENGINE_SCRAPE_CEILING_SECONDS, math.floor(metrics_max_age_seconds / 2)))


def longest_gap_seconds(schedule: str) -> int:
    """The longest time between two runs of a six-field cron schedule (CloudNativePG's, seconds first), over its next
    hundred runs from a fixed day: deterministic, and long enough to meet a monthly schedule's shortest month."""
    runs = croniter(schedule, SCHEDULE_EPOCH, second_at_beginning=True)
    times = [runs.get_next(float) for _ in range(100)]
    return int(max(later - earlier for earlier, later in zip(times, times[1:])))


def _plan_platform(spec: Spec) -> PlatformPlan:
    postgres = spec.platform.postgres
    return PlatformPlan(
        namespace=spec.platform.namespace,
        storage_class=spec.platform.storage_class,
        postgres_instances=postgres.instances,
        postgres_storage_bytes=postgres.storage_gib * 2**30,
        postgres_backup_destination=postgres.backup_destination,
        postgres_backup_schedule=postgres.backup_schedule,
        postgres_backup_longest_gap_seconds=longest_gap_seconds(postgres.backup_schedule),
        postgres_backup_retention_days=postgres.backup_retention_days,
        cloud_identity=_plan_cloud_identity(spec),
        runbook_base_url=spec.platform.runbook_base_url,
        model_cache_access_mode=spec.platform.model_cache.access_mode,
        model_cache_storage_class=spec.platform.model_cache.storage_class or spec.platform.storage_class,
    )


def _plan_cloud_identity(spec: Spec) -> CloudIdentityPlan | None:
    identity = spec.platform.cloud_identity
    if identity is None:
        return None
    return CloudIdentityPlan(
        provider=identity.provider, aws_role_arn=identity.aws_role_arn,
        gcp_service_account=identity.gcp_service_account, credentials_secret=identity.credentials_secret,
        bucket_schemes=bucket_schemes(spec),
    )
