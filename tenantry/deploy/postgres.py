"""LiteLLM's PostgreSQL (keys, teams, budgets, spend), run by CloudNativePG.

Why an operator rather than a chart of StatefulSets: CloudNativePG promotes a
replica when the primary fails, archives WAL continuously and takes
scheduled base backups to object storage, so spend survives a lost node or
volume; a plain StatefulSet does none of that. The password is a Pulumi
secret; the names below hold state and must never change (a test pins them).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from tenantry.deploy.common import chart_namespace, labels, mebibytes, pinned_release
from tenantry.deploy.identity import BucketAccess, bucket_access
from tenantry.pins import chart
from tenantry.plan.model import PlatformPlan

CLUSTER_NAME = "tenantry-postgres"
OWNER_SECRET = "tenantry-postgres-litellm"
DATABASE = "litellm"
OWNER = "litellm"
DATA_PRIORITY_CLASS = "tenantry-data"


@dataclass(frozen=True)
class PostgresArgs:
    platform: PlatformPlan
    image: str


class Postgres(pulumi.ComponentResource):
    def __init__(self, name: str, args: PostgresArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:postgres:Postgres", name, None, opts)
        p, ns = args.platform, args.platform.namespace
        pin = chart("cloudnative-pg")
        operator_ns = chart_namespace(f"{name}-operator-namespace", pin, "restricted", self)
        operator = pinned_release(f"{name}-operator", pin, pin.values, self, [operator_ns])
        password = random.RandomPassword(f"{name}-password", length=40, special=False, opts=pulumi.ResourceOptions(parent=self))
        owner_secret = k8s.core.v1.Secret(
            f"{name}-owner",
            metadata={"name": OWNER_SECRET, "namespace": ns, "labels": labels("postgres")},
            type="kubernetes.io/basic-auth",
            string_data={"username": OWNER, "password": password.result},
            opts=pulumi.ResourceOptions(parent=self),
        )
        spec: dict = {
            "instances": p.postgres_instances,
            "imageName": args.image,
            "priorityClassName": DATA_PRIORITY_CLASS,
            "storage": {"size": mebibytes(p.postgres_storage_bytes), "storageClass": p.storage_class},
            "bootstrap": {"initdb": {"database": DATABASE, "owner": OWNER, "secret": {"name": OWNER_SECRET}}},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
            "monitoring": {"enablePodMonitor": True},
        }
        access = bucket_access(p)
        if p.postgres_backup_destination and access is not None:
            spec["backup"] = {
                "retentionPolicy": f"{p.postgres_backup_retention_days}d",
                "barmanObjectStore": _object_store(p.postgres_backup_destination, access),
            }
            if access.annotations:
                # The instance pods archive WAL as the stack's cloud identity (docs/decisions.md: Bucket readers act as one declared identity).
                spec["serviceAccountTemplate"] = {"metadata": {"annotations": access.annotations}}
        cluster = k8s.apiextensions.CustomResource(
            f"{name}-cluster",
            api_version="postgresql.cnpg.io/v1",
            kind="Cluster",
            metadata={"name": CLUSTER_NAME, "namespace": ns, "labels": labels("postgres")},
            spec=spec,
            # Renaming this resource would delete the database: keep the name, or add an alias.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[operator, owner_secret]),
        )
        if p.postgres_backup_destination:
            k8s.apiextensions.CustomResource(
                f"{name}-backup",
                api_version="postgresql.cnpg.io/v1",
                kind="ScheduledBackup",
                metadata={"name": f"{CLUSTER_NAME}-base", "namespace": ns, "labels": labels("postgres")},
                spec={"schedule": p.postgres_backup_schedule, "cluster": {"name": CLUSTER_NAME},
                      "backupOwnerReference": "self", "method": "barmanObjectStore", "immediate": True},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster]),
            )
        self.service_host = f"{CLUSTER_NAME}-rw.{ns}.svc"
        self.database_url = pulumi.Output.secret(
            password.result.apply(lambda pw: f"postgresql://{OWNER}:{pw}@{self.service_host}:5432/{DATABASE}")
        )
        self.register_outputs({"host": self.service_host})


def _object_store(destination: str, access: BucketAccess) -> dict:
    """Base backups and WAL to object storage as the stack's cloud identity."""
    return {"destinationPath": destination, **access.barman_credentials(destination), "wal": {"compression": "gzip"},
            "data": {"compression": "gzip"}}
