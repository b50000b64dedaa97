"""Every pod that reads or writes a bucket runs as the stack's declared
identity (docs/decisions.md: Bucket readers act as one declared identity):
fetchers that run rclone against s3:// or gs://, and PostgreSQL clusters
that archive to an object store."""

from __future__ import annotations

import re
from typing import Any

from tenantry.deploy.identity import BucketAccess, bucket_access
from tenantry.deploy.postgres import BARMAN_PLUGIN
from tenantry.manifests.resources import Resource, containers, pod_spec
from tenantry.plan.model import Plan

RCLONE_BUCKET_REMOTE = re.compile(r":(s3|gcs),")
"""rclone's on-the-fly remotes for S3 and GCS (tenantry/deploy/sources.py writes them)."""


def bucket_readers_have_an_identity(resources: list[Resource], plan: Plan) -> list[str]:
    """Bucket fetchers run as the identity's service account (with the keys, for static credentials), the
    service account carries the workload-identity annotation, and a backed-up PostgreSQL cluster's pods carry
    it too (CloudNativePG's serviceAccountTemplate) or its object store names the credentials Secret."""
    access = bucket_access(plan.platform)
    violations = _service_account_violations(resources, access)
    config_maps = {(r.namespace, r.metadata.get("name")): r.props.get("data") or {}
                   for r in resources if r.kind == "ConfigMap"}
    for resource in resources:
        if pod_spec(resource) is not None and _runs_bucket_fetch(resource, config_maps):
            violations += _fetcher_violations(resource, access)
        if resource.kind == "Cluster" and resource.type.startswith("kubernetes:postgresql.cnpg.io"):
            violations += _postgres_violations(resource, resources, access)
    return violations


def _service_account_violations(resources: list[Resource], access: BucketAccess | None) -> list[str]:
    if access is None or not access.annotations:
        return []
    accounts = [r for r in resources if r.kind == "ServiceAccount" and r.metadata.get("name") == access.service_account]
    if not accounts:
        return [f"ServiceAccount {access.service_account} is not rendered, but bucket readers run as it"]
    return [f"{account.label} does not carry {access.annotations}" for account in accounts
            if not access.annotations.items() <= (account.metadata.get("annotations") or {}).items()]


def _runs_bucket_fetch(resource: Resource, config_maps: dict[tuple[Any, Any], dict[str, Any]]) -> bool:
    texts = [" ".join(map(str, [*(c.get("command") or []), *(c.get("args") or [])])) for c in containers(resource)]
    for volume in (pod_spec(resource) or {}).get("volumes") or []:
        name = (volume.get("configMap") or {}).get("name")
        if name:
            texts += map(str, config_maps.get((resource.namespace, name), {}).values())
    return any(RCLONE_BUCKET_REMOTE.search(text) for text in texts)


def _fetcher_violations(resource: Resource, access: BucketAccess | None) -> list[str]:
    if access is None:
        return [f"{resource.label} fetches from a bucket, but the stack declares no platform.cloud_identity"]
    spec = pod_spec(resource) or {}
    violations = []
    if spec.get("serviceAccountName") != access.service_account:
        violations.append(f"{resource.label} fetches from a bucket as service account "
                          f"{spec.get('serviceAccountName') or 'default'}, not {access.service_account}")
    names = {e.get("name") for e in access.env}
    for container in containers(resource):
        text = " ".join(map(str, [*(container.get("command") or []), *(container.get("args") or [])]))
        is_fetcher = "rclone" in str(container.get("image")) or RCLONE_BUCKET_REMOTE.search(text)
        if is_fetcher and not names <= {e.get("name") for e in container.get("env") or []}:
            violations.append(f"{resource.label} container {container.get('name')} fetches from a bucket "
                              f"without the credentials {sorted(names)}")
    return violations


def _postgres_violations(cluster: Resource, resources: list[Resource], access: BucketAccess | None) -> list[str]:
    spec = cluster.props.get("spec") or {}
    stores = [((spec.get("backup") or {}).get("barmanObjectStore"))] if (spec.get("backup") or {}).get("barmanObjectStore") else []
    if any((p or {}).get("name") == BARMAN_PLUGIN for p in spec.get("plugins") or []):
        stores += [(r.props.get("spec") or {}).get("configuration") or {} for r in resources
                   if r.kind == "ObjectStore" and r.namespace == cluster.namespace]
    if not stores:
        return []
    if access is None:
        return [f"{cluster.label} archives to a bucket, but the stack declares no platform.cloud_identity"]
    violations = []
    annotations = ((spec.get("serviceAccountTemplate") or {}).get("metadata") or {}).get("annotations") or {}
    if not access.annotations.items() <= annotations.items():
        violations.append(f"{cluster.label} archives to a bucket, but its serviceAccountTemplate does not carry "
                          f"{access.annotations}")
    for store in stores:
        wanted = access.barman_credentials(str(store.get("destinationPath", "")))
        if any(store.get(key) != value for key, value in wanted.items()):
            violations.append(f"{cluster.label} archives to {store.get('destinationPath')} with credentials "
                              f"{ {k: store.get(k) for k in wanted} }, the identity says {wanted}")
    return violations
