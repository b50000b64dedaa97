"""LiteLLM's PostgreSQL as rendered for every shipped stack: backups through the
Barman Cloud plugin (the in-tree barmanObjectStore is gone in CloudNativePG
1.31), metrics through a PodMonitor tenantry owns, and the image pinned to the
catalog's current PostgreSQL 16."""

from __future__ import annotations

import json
import re

import pytest

from tenantry.deploy.identity import bucket_access
from tenantry.deploy.postgres import BARMAN_PLUGIN, CLUSTER_NAME, OBJECT_STORE
from tenantry.manifests.checks import policy_resources
from tenantry.monitoring.rules import rule_groups
from tenantry.manifests.resources import Resource
from tenantry.manifests.validate import validate_manifests
from tenantry.pins import IMAGES, chart
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.test_render import STACKS
from tests.manifests.tampering import shared_render


@pytest.fixture(scope="module", params=STACKS)
def stack(request):
    plan = plan_stack(request.param)
    return plan, policy_resources(shared_render(request.param))


def _one(resources: list[Resource], kind: str) -> Resource:
    (found,) = [r for r in resources if r.kind == kind]
    return found


def _created_after(resource: Resource, resources: list[Resource]) -> set[str]:
    """The charts of the Helm releases `resource` depends on, directly or through other resources."""
    by_urn = {r.urn: r for r in resources}
    seen, queue = set(), list(resource.dependencies)
    while queue:
        urn = queue.pop()
        if urn in seen or urn not in by_urn:
            continue
        seen.add(urn)
        queue += by_urn[urn].dependencies
    return {str(by_urn[u].props.get("chart")) for u in seen if by_urn[u].kind == "Release"}


def test_no_object_uses_the_in_tree_barman_object_store(stack):
    _, resources = stack
    assert "barmanObjectStore" not in json.dumps([r.props for r in resources], default=str)


def test_a_backed_up_cluster_archives_through_the_barman_cloud_plugin(stack):
    plan, resources = stack
    platform = plan.platform
    if not platform.postgres_backup_destination:
        assert not [r for r in resources if r.kind in ("ObjectStore", "ScheduledBackup")]
        return
    cluster = _one(resources, "Cluster").props["spec"]
    assert "backup" not in cluster
    assert cluster["plugins"] == [{"name": BARMAN_PLUGIN, "isWALArchiver": True,
                                   "parameters": {"barmanObjectName": OBJECT_STORE}}]
    assert cluster["serviceAccountTemplate"]["metadata"]["annotations"] == bucket_access(platform).annotations
    store = _one(resources, "ObjectStore")
    assert store.type == "kubernetes:barmancloud.cnpg.io/v1:ObjectStore"
    assert store.metadata["name"] == OBJECT_STORE and store.namespace == platform.namespace
    assert store.props["spec"]["retentionPolicy"] == f"{platform.postgres_backup_retention_days}d"
    configuration = store.props["spec"]["configuration"]
    assert configuration["destinationPath"] == platform.postgres_backup_destination
    assert configuration | bucket_access(platform).barman_credentials(platform.postgres_backup_destination) == configuration
    backup = _one(resources, "ScheduledBackup").props["spec"]
    assert backup["method"] == "plugin" and backup["pluginConfiguration"] == {"name": BARMAN_PLUGIN}
    assert backup["schedule"] == platform.postgres_backup_schedule and backup["cluster"] == {"name": CLUSTER_NAME}


def test_the_plugin_runs_beside_the_operator_after_cert_manager(stack):
    plan, resources = stack
    releases = {str(r.props.get("chart")): r for r in resources if r.kind == "Release"}
    if not plan.platform.postgres_backup_destination:
        assert "plugin-barman-cloud" not in releases and "cert-manager" not in releases
        return
    plugin = releases["plugin-barman-cloud"]
    # The plugin's docs: it must be installed in the operator's namespace.
    assert plugin.props["namespace"] == chart("cloudnative-pg").namespace
    assert _created_after(plugin, resources) >= {"cert-manager", "cloudnative-pg"}
    assert releases["cert-manager"].props["values"]["crds"]["enabled"] is True
    # The Cluster names the plugin: it is created once the plugin and its ObjectStore exist.
    assert _created_after(_one(resources, "Cluster"), resources) >= {"cloudnative-pg", "plugin-barman-cloud"}


def test_postgres_is_scraped_through_a_pod_monitor_after_kube_prometheus_stack(stack):
    plan, resources = stack
    cluster = _one(resources, "Cluster").props["spec"]
    assert "enablePodMonitor" not in (cluster.get("monitoring") or {})
    monitor = _one(resources, "PodMonitor")
    assert monitor.namespace == plan.platform.namespace
    assert monitor.props["spec"]["selector"]["matchLabels"] == {"cnpg.io/cluster": CLUSTER_NAME,
                                                               "cnpg.io/podRole": "instance"}
    assert monitor.props["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    assert "kube-prometheus-stack" in _created_after(monitor, resources)
    # PostgresDown reads its targets' `up` by the job the Prometheus Operator names them: <namespace>/<name>.
    postgres_down = next(r for g in rule_groups(plan) for r in g["rules"] if r.get("alert") == "PostgresDown")
    assert f'up{{job="{monitor.namespace}/{monitor.metadata["name"]}"}}' in postgres_down["expr"]


def test_the_cluster_runs_the_catalogs_current_postgresql_16_by_digest():
    image = IMAGES["postgres"]
    match = re.fullmatch(r"ghcr\.io/cloudnative-pg/postgresql:(\d+)\.(\d+)-\d{12}-standard-trixie@sha256:[0-9a-f]{64}", image)
    assert match, image
    # A major upgrade needs pg_upgrade or an import: never by changing this pin.
    assert match.group(1) == "16" and int(match.group(2)) >= 15
    cluster = _one(policy_resources(shared_render("local")), "Cluster")
    assert cluster.props["spec"]["imageName"] == image


@pytest.mark.parametrize(("kind", "api_version", "spec", "reason"), [
    ("Cluster", "postgresql.cnpg.io/v1",
     {"backup": {"barmanObjectStore": {"destinationPath": "s3://b/p"}}}, "removed in CloudNativePG 1.31"),
    ("Cluster", "postgresql.cnpg.io/v1", {"monitoring": {"enablePodMonitor": True}}, "render a PodMonitor"),
    ("Cluster", "postgresql.cnpg.io/v1", {"plugins": [{"name": BARMAN_PLUGIN, "isWALArchiver": True}]},
     "barmanObjectName"),
    ("ScheduledBackup", "postgresql.cnpg.io/v1",
     {"schedule": "0 0 3 * * *", "cluster": {"name": "c"}, "method": "barmanObjectStore"}, "must be plugin"),
    ("ScheduledBackup", "postgresql.cnpg.io/v1",
     {"schedule": "0 0 3 * * *", "cluster": {"name": "c"}, "method": "plugin"}, "pluginConfiguration.name"),
    ("ObjectStore", "barmancloud.cnpg.io/v1",
     {"configuration": {"destinationPath": "s3://b/p", "serverName": "x"}}, "serverName must be empty"),
    ("ObjectStore", "barmancloud.cnpg.io/v1",
     {"configuration": {"destinationPath": "s3://b/p"}, "retentionPolicy": "14 days"}, "retentionPolicy"),
    ("PodMonitor", "monitoring.coreos.com/v1", {"selector": {"matchLabels": {"a": "b"}}}, "podMetricsEndpoints"),
], ids=["in-tree-backup", "operator-pod-monitor", "archiver-without-store", "in-tree-scheduled-backup",
        "plugin-backup-without-plugin", "store-server-name", "store-retention", "pod-monitor-without-endpoints"])
def test_structural_checks_refuse_what_the_pinned_releases_do_not_accept(kind, api_version, spec, reason):
    base = {"instances": 1, "imageName": "i:1", "storage": {"size": "1Gi"},
            "bootstrap": {"initdb": {"database": "d", "owner": "o", "secret": {"name": "s"}}}} if kind == "Cluster" else {}
    problems = validate_manifests([{"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "n"},
                                    "spec": base | spec}], "1.35")
    assert any(reason in p for p in problems), problems
