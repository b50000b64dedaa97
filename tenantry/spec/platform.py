"""Shared services on Kubernetes: the namespace, storage, and LiteLLM's PostgreSQL."""

from __future__ import annotations

from tenantry.spec.fields import (
    OBJECT_STORE_PATTERN,
    SIX_FIELD_CRON_PATTERN,
    Name,
    SpecModel,
    field,
)


class PostgresSpec(SpecModel):
    """LiteLLM's database: keys, teams, budgets and spend."""

    instances: int = field(2, description="PostgreSQL instances (one primary, the rest streaming replicas).", ge=1, le=9)
    storage_gib: int = field(20, description="Volume of each instance.", unit="GiB", ge=1, le=100_000)
    backup_destination: str | None = field(
        None, description="Object store for base backups and WAL archives (s3://bucket/path or gs://bucket/path); "
        "omit and the plan warns that nothing is backed up.",
        pattern=OBJECT_STORE_PATTERN,
    )
    backup_schedule: str = field(
        "0 0 3 * * *", description="When base backups run: six-field cron with seconds (CloudNativePG's format).",
        pattern=SIX_FIELD_CRON_PATTERN,
    )
    backup_retention_days: int = field(14, description="How long backups are kept.", unit="days", ge=1, le=3650)


class PlatformSpec(SpecModel):
    """Where and how the shared services run on Kubernetes."""

    namespace: Name = field("tenantry", description="Namespace of the gateway, engines, PostgreSQL and Redis.")
    storage_class: Name | None = field(None, description="StorageClass for volumes; omit for the cluster default.")
    postgres: PostgresSpec = field(default_factory=PostgresSpec, description="LiteLLM's PostgreSQL.")
