"""LiteLLM's PostgreSQL (keys, teams, budgets, spend), run by CloudNativePG.

Why an operator rather than a chart of StatefulSets: CloudNativePG promotes a
replica when the primary fails, archives WAL continuously and takes
scheduled base backups to object storage, so spend survives a lost node or
volume; a plain StatefulSet does none of that. Backups go through the
Barman Cloud plugin, which needs cert-manager (docs/decisions.md: PostgreSQL
backups through the Barman Cloud plugin). The password is a Pulumi secret;
the names below hold state and must never change (a test pins them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from tenantry.deploy.common import chart_namespace, labels, mebibytes, pinned_release, waits_until
from tenantry.deploy.identity import BucketAccess, bucket_access
from tenantry.monitoring.rules import POSTGRES_POD_MONITOR
from tenantry.pins import chart
from tenantry.plan.model import PlatformPlan

CLUSTER_NAME = "tenantry-postgres"
READY_CONDITION = "Ready"
"""The Cluster's status condition once it serves (CloudNativePG 1.30: api/v1 ConditionClusterReady)."""
READY_SECONDS = 1200
"""How long `pulumi up` waits for the Cluster to be Ready on a fresh cluster: the operator, a first pull of the
PostgreSQL image (about 400 MB), initdb and the instances' start; 10 minutes, pulumi-kubernetes' default, is short
on a slow registry."""
OWNER_SECRET = "tenantry-postgres-litellm"
DATABASE = "litellm"
OWNER = "litellm"
DATA_PRIORITY_CLASS = "tenantry-data"
BARMAN_PLUGIN = "barman-cloud.cloudnative-pg.io"
OBJECT_STORE = f"{CLUSTER_NAME}-backups"
# Not the Cluster's own name: that is the PodMonitor the operator made while enablePodMonitor was on,
# and it deletes that one once the flag is off (docs/decisions.md: PostgreSQL metrics through a PodMonitor tenantry owns).
# PostgresDown reads its targets' `up` by the job the Prometheus Operator names after it.
POD_MONITOR = POSTGRES_POD_MONITOR
METRICS_PORT = "metrics"
"""The instance pods' exporter port (CloudNativePG 1.30, pkg/specs/pods.go: port 9187, path /metrics)."""
METRICS_PORT_NUMBER = 9187
PORT = 5432


@dataclass(frozen=True)
class PostgresArgs:
    platform: PlatformPlan
    image: str
    monitoring_release: pulumi.Resource
    """kube-prometheus-stack's release, which installs the PodMonitor CRD."""


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
        spec: dict[str, Any] = {
            "instances": p.postgres_instances,
            "imageName": args.image,
            "priorityClassName": DATA_PRIORITY_CLASS,
            "storage": {"size": mebibytes(p.postgres_storage_bytes), "storageClass": p.storage_class},
            "bootstrap": {"initdb": {"database": DATABASE, "owner": OWNER, "secret": {"name": OWNER_SECRET}}},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
        }
        cluster_needs: list[pulumi.Resource] = [operator, owner_secret]
        access = bucket_access(p)
        if p.postgres_backup_destination and access is not None:
            plugin = self._backup_plugin(name, operator_ns, operator, args.monitoring_release)
            cluster_needs.append(self._object_store(name, p, access, plugin))
            spec.update(_archiving(access))
        cluster = k8s.apiextensions.CustomResource(
            f"{name}-cluster",
            api_version="postgresql.cnpg.io/v1",
            kind="Cluster",
            # The gateway waits for it: ready after a first pull of the PostgreSQL image, initdb and the first start.
            metadata={"name": CLUSTER_NAME, "namespace": ns, "labels": labels("postgres"),
                      "annotations": waits_until(READY_CONDITION, READY_SECONDS)},
            spec=spec,
            # Renaming this resource would delete the database: keep the name, or add an alias.
            opts=pulumi.ResourceOptions(parent=self, depends_on=cluster_needs),
        )
        if p.postgres_backup_destination and access is not None:
            k8s.apiextensions.CustomResource(
                f"{name}-backup",
                api_version="postgresql.cnpg.io/v1",
                kind="ScheduledBackup",
                metadata={"name": f"{CLUSTER_NAME}-base", "namespace": ns, "labels": labels("postgres")},
                spec={"schedule": p.postgres_backup_schedule, "cluster": {"name": CLUSTER_NAME},
                      "backupOwnerReference": "self", "method": "plugin",
                      "pluginConfiguration": {"name": BARMAN_PLUGIN}, "immediate": True},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster]),
            )
        _pod_monitor(f"{name}-monitor", ns, pulumi.ResourceOptions(parent=self, depends_on=[args.monitoring_release]))
        self.cluster = cluster
        """The CloudNativePG Cluster, ready once `pulumi up` has created it: what the gateway waits for."""
        self.service_host = f"{CLUSTER_NAME}-rw.{ns}.svc"
        self.database_url = pulumi.Output.secret(
            password.result.apply(lambda pw: f"postgresql://{OWNER}:{pw}@{self.service_host}:{PORT}/{DATABASE}")
        )
        self.register_outputs({"host": self.service_host})

    def _backup_plugin(self, name: str, operator_ns: k8s.core.v1.Namespace, operator: pulumi.Resource,
                       monitoring: pulumi.Resource) -> pulumi.Resource:
        """cert-manager, then the Barman Cloud plugin in the operator's namespace (the plugin's
        docs require it there); the plugin's release waits for cert-manager's, whose webhook must
        answer before the plugin's Certificates can be created. cert-manager's ServiceMonitor (its
        certificates' renewal and expiry for the alerts) waits for the release that installs its CRD."""
        certs = chart("cert-manager")
        certs_ns = chart_namespace(f"{name}-cert-manager-namespace", certs, "restricted", self)
        cert_manager = pinned_release(f"{name}-cert-manager", certs, certs.values, self, [certs_ns, monitoring])
        plugin = chart("plugin-barman-cloud")
        return pinned_release(f"{name}-backup-plugin", plugin, plugin.values, self, [operator_ns, operator, cert_manager])

    def _object_store(self, name: str, p: PlatformPlan, access: BucketAccess, plugin: pulumi.Resource) -> pulumi.Resource:
        """Where base backups and WAL go, as the stack's cloud identity; the retention window lives
        here with the plugin (the in-tree backup kept it on the Cluster)."""
        destination = str(p.postgres_backup_destination)
        return k8s.apiextensions.CustomResource(
            f"{name}-object-store",
            api_version="barmancloud.cnpg.io/v1",
            kind="ObjectStore",
            metadata={"name": OBJECT_STORE, "namespace": p.namespace, "labels": labels("postgres")},
            spec={
                "configuration": {"destinationPath": destination, **access.barman_credentials(destination),
                                  "wal": {"compression": "gzip"}, "data": {"compression": "gzip"}},
                "retentionPolicy": f"{p.postgres_backup_retention_days}d",
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[plugin]),
        )


def _archiving(access: BucketAccess) -> dict[str, Any]:
    """The Cluster's side of the plugin: it archives WAL, and the instance pods, where the
    plugin's sidecar runs, carry the workload identity (docs/decisions.md: Bucket readers act
    as one declared identity)."""
    fields: dict[str, Any] = {"plugins": [
        {"name": BARMAN_PLUGIN, "isWALArchiver": True, "parameters": {"barmanObjectName": OBJECT_STORE}},
    ]}
    if access.annotations:
        fields["serviceAccountTemplate"] = {"metadata": {"annotations": access.annotations}}
    return fields


def _pod_monitor(resource_name: str, namespace: str, opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """Prometheus scrapes every instance's exporter, with the selector the operator's own
    PodMonitor used (CloudNativePG 1.30, pkg/specs/podmonitor.go)."""
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version="monitoring.coreos.com/v1",
        kind="PodMonitor",
        metadata={"name": POD_MONITOR, "namespace": namespace, "labels": labels("monitoring")},
        spec={
            "selector": {"matchLabels": {"cnpg.io/cluster": CLUSTER_NAME, "cnpg.io/podRole": "instance"}},
            "podMetricsEndpoints": [{"port": METRICS_PORT, "path": "/metrics"}],
            "namespaceSelector": {"matchNames": [namespace]},
        },
        opts=opts,
    )
