"""The identity of every pod that reads or writes object storage: weight and
adapter fetchers for s3:// and gs:// sources, and PostgreSQL's backups.

One Kubernetes service account, tenantry-buckets, carries the workload
identity (IRSA's role annotation on EKS, Workload Identity's on GKE); with
static credentials it carries nothing and the pods read the keys from the
Secret the platform team created. Pods that touch no bucket keep the
namespace's default account (docs/decisions.md: Bucket readers act as one
declared identity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import labels
from tenantry.plan.model import CloudIdentityPlan, PlatformPlan

BUCKET_SERVICE_ACCOUNT = "tenantry-buckets"
AWS_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
"""Read by EKS's pod identity webhook, which injects the role's web-identity token into the pod."""
GCP_SERVICE_ACCOUNT_ANNOTATION = "iam.gke.io/gcp-service-account"
"""Read by GKE's metadata server, which answers the pod's credential requests as that account."""
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
GCP_KEY_FILE = "service-account.json"
GCP_KEY_DIR = "/var/run/secrets/tenantry-gcp"


@dataclass(frozen=True, kw_only=True)
class BucketAccess:
    """What a pod that reads or writes a bucket carries: its service account,
    and with static credentials the keys (environment for S3, a key file for GCS)."""

    service_account: str
    annotations: dict[str, str]
    """The workload-identity annotation of the service account (CloudNativePG's serviceAccountTemplate)."""
    env: tuple[dict[str, Any], ...]
    volumes: tuple[dict[str, Any], ...]
    volume_mounts: tuple[dict[str, Any], ...]
    identity: CloudIdentityPlan

    def barman_credentials(self, destination: str) -> dict[str, Any]:
        """The credentials block of a Barman object store (the in-tree `barmanObjectStore` and the
        Barman Cloud plugin's ObjectStore `configuration` share it) for an s3:// or gs:// destination."""
        secret = self.identity.credentials_secret
        if destination.startswith("s3://"):
            if secret:
                return {"s3Credentials": {"accessKeyId": {"name": secret, "key": AWS_KEYS[0]},
                                          "secretAccessKey": {"name": secret, "key": AWS_KEYS[1]}}}
            return {"s3Credentials": {"inheritFromIAMRole": True}}
        if secret:
            return {"googleCredentials": {"applicationCredentials": {"name": secret, "key": GCP_KEY_FILE}}}
        return {"googleCredentials": {"gkeEnvironment": True}}


def bucket_access(platform: PlatformPlan) -> BucketAccess | None:
    """None when the stack declares no identity (then it reaches no bucket: the spec refuses otherwise)."""
    identity = platform.cloud_identity
    if identity is None:
        return None
    annotations: dict[str, str] = {}
    if identity.aws_role_arn:
        annotations[AWS_ROLE_ANNOTATION] = identity.aws_role_arn
    if identity.gcp_service_account:
        annotations[GCP_SERVICE_ACCOUNT_ANNOTATION] = identity.gcp_service_account
    env: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    secret = identity.credentials_secret
    if secret and "s3" in identity.bucket_schemes:
        env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}} for key in AWS_KEYS]
    if secret and "gs" in identity.bucket_schemes:
        volumes.append({"name": "gcp-key", "secret": {"secretName": secret, "items": [{"key": GCP_KEY_FILE, "path": GCP_KEY_FILE}]}})
        mounts.append({"name": "gcp-key", "mountPath": GCP_KEY_DIR, "readOnly": True})
        env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{GCP_KEY_DIR}/{GCP_KEY_FILE}"})
    return BucketAccess(service_account=BUCKET_SERVICE_ACCOUNT, annotations=annotations, env=tuple(env),
                        volumes=tuple(volumes), volume_mounts=tuple(mounts), identity=identity)


def bucket_service_account(name: str, platform: PlatformPlan, opts: pulumi.ResourceOptions) -> k8s.core.v1.ServiceAccount | None:
    """The service account bucket readers and writers run as, with its workload-identity annotation."""
    access = bucket_access(platform)
    if access is None:
        return None
    return k8s.core.v1.ServiceAccount(
        name,
        metadata={"name": access.service_account, "namespace": platform.namespace, "labels": labels("buckets"),
                  "annotations": access.annotations},
        # The cloud's webhook or metadata server needs no API token; nothing else in these pods calls the API.
        automount_service_account_token=False,
        opts=opts,
    )
