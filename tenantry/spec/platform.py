"""Shared services on Kubernetes: the namespace, storage, and LiteLLM's PostgreSQL."""

from __future__ import annotations

from tenantry.spec.fields import (
    AWS_ROLE_ARN_PATTERN,
    GCP_SERVICE_ACCOUNT_PATTERN,
    OBJECT_STORE_PATTERN,
    SIX_FIELD_CRON_PATTERN,
    CloudIdentityProvider,
    ModelCacheAccessMode,
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


class CloudIdentitySpec(SpecModel):
    """Who the pods that read or write object storage act as: weight and adapter fetchers for s3:// and gs://
    sources, and PostgreSQL's backups (docs/decisions.md: Bucket readers act as one declared identity)."""

    provider: CloudIdentityProvider = field(
        description="aws: IAM Roles for Service Accounts (EKS); gcp: Workload Identity (GKE); static: keys in a "
        "Secret, for S3-compatible stores or clusters without workload identity.",
    )
    aws_role_arn: str | None = field(
        None, description="provider aws: the IAM role the pods assume (arn:aws:iam::<account>:role/<name>); its "
        "trust policy must name the service accounts tenantry-buckets (fetchers) and tenantry-postgres (PostgreSQL's "
        "instances, named by CloudNativePG after the cluster) in the platform namespace.",
        pattern=AWS_ROLE_ARN_PATTERN,
    )
    gcp_service_account: str | None = field(
        None, description="provider gcp: the Google service account the pods act as "
        "(<name>@<project>.iam.gserviceaccount.com); it must grant roles/iam.workloadIdentityUser to "
        "the Kubernetes service accounts tenantry-buckets and tenantry-postgres in the platform namespace.",
        pattern=GCP_SERVICE_ACCOUNT_PATTERN,
    )
    credentials_secret: Name | None = field(
        None, description="provider static: a Secret in the platform namespace, created before `pulumi up`, with "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3:// and service-account.json (a key file) for gs://.",
    )


class ModelCacheSpec(SpecModel):
    """The claims engines' weights and adapters live in: a Job fills each once per model revision (or set of
    adapters) and every replica mounts it read-only (docs/decisions.md: Weights live in a cache claim filled once)
    (docs/decisions.md: Cache claims are ReadWriteOnce unless the spec says otherwise)."""

    access_mode: ModelCacheAccessMode = field(
        "ReadWriteOnce", description="ReadWriteOnce works with every StorageClass, but all replicas of an engine "
        "must then share one node (the plan refuses an engine whose replicas can span nodes); ReadWriteMany (a "
        "StorageClass that offers it, such as EFS, Filestore or CephFS) lets replicas run anywhere.",
    )
    storage_class: Name | None = field(
        None, description="StorageClass of the cache claims (one that offers `access_mode`); omit for "
        "platform.storage_class.",
    )


class PlatformSpec(SpecModel):
    """Where and how the shared services run on Kubernetes."""

    namespace: Name = field("tenantry", description="Namespace of the gateway, engines, PostgreSQL and Redis.")
    storage_class: Name | None = field(None, description="StorageClass for volumes; omit for the cluster default.")
    postgres: PostgresSpec = field(default_factory=PostgresSpec, description="LiteLLM's PostgreSQL.")
    model_cache: ModelCacheSpec = field(
        default_factory=ModelCacheSpec, description="Where engines' weights and adapters are cached.",
    )
    runbook_base_url: str = field(
        "runbooks", description="Where the runbooks are published: an absolute http(s) URL on a stack with GPU "
        "pools (alerts are opened from a pager), or a path relative to the repository on a CPU-only stack; each "
        "alert's runbook_url is <this>/<AlertName>.md.", pattern=r"^\S+[^/\s]$",
    )
    cloud_identity: CloudIdentitySpec | None = field(
        None, description="The identity of pods that read or write object storage; required when any weight or "
        "adapter source, or the PostgreSQL backup destination, is an s3:// or gs:// bucket.",
    )
