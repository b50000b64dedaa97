"""The resources tenantry's policies read: a program's registered resources
as (type token, logical name, properties), and where known its URN, its
parent's URN and the URNs it depends on; secret values are
`tenantry.manifests.offline.Secret` markers. Accessors for pods, labels and
quantities shared by every policy module."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tenantry.manifests.offline import Secret

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "ReplicaSet", "LeaderWorkerSet"}
ENGINE_SELECTOR_KEY = "tenantry.io/engine"
TENANT_LABEL = "tenantry.io/tenant"


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    props: dict[str, Any]
    urn: str = ""
    parent: str | None = None
    dependencies: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.props.get("metadata") or {}

    @property
    def namespace(self) -> str | None:
        return self.metadata.get("namespace")

    @property
    def label(self) -> str:
        meta = self.metadata
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        return f"{self.kind} {where}{meta.get('name', self.name)}"


def from_policy_props(value: Any) -> Any:
    """Properties as pulumi-policy hands them over (behind proxies that hide
    which values are secret) turned into plain values with Secret markers."""
    from pulumi_policy.secret import Secret as PolicySecret

    if hasattr(value, "__getitem__") and not isinstance(value, (str, bytes, list, dict)):
        try:
            value = value["__target"]
        except (KeyError, TypeError, IndexError):
            pass
    if isinstance(value, PolicySecret):
        return Secret(from_policy_props(value.value))
    if isinstance(value, dict):
        return {k: from_policy_props(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_policy_props(v) for v in value]
    return value


ENGINE_WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")
"""What runs an engine: a Deployment, or a LeaderWorkerSet for one whose replicas span nodes."""


def workloads_by_name(resources: list[Resource]) -> dict[str, Resource]:
    """The engine workload kinds' objects by name."""
    return {r.metadata.get("name"): r for r in resources if r.kind in ENGINE_WORKLOAD_KINDS}


def pod_templates(resource: Resource) -> list[dict[str, Any]]:
    """Every pod template of a workload (metadata and spec): a LeaderWorkerSet has its leader's and its
    workers'; the other kinds one, or none."""
    spec = resource.props.get("spec") or {}
    if resource.kind == "LeaderWorkerSet":
        group = spec.get("leaderWorkerTemplate") or {}
        return [t for t in (group.get("leaderTemplate"), group.get("workerTemplate")) if t]
    if resource.kind == "Pod":
        return [resource.props]
    if resource.kind == "CronJob":
        return [t for t in [((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")] if t]
    if resource.kind in WORKLOAD_KINDS:
        return [t for t in [spec.get("template")] if t]
    return []


def pod_spec(resource: Resource) -> dict[str, Any] | None:
    """The workload's pod spec: its first pod template's (a LeaderWorkerSet's leader's)."""
    return next((t.get("spec") for t in pod_templates(resource)), None)


def containers(resource: Resource) -> Iterator[dict[str, Any]]:
    """Every container of every pod template of the workload, init containers first."""
    for template in pod_templates(resource):
        spec = template.get("spec") or {}
        yield from spec.get("initContainers") or []
        yield from spec.get("containers") or []


def template_labels(resource: Resource) -> dict[str, str]:
    """The labels of the workload's pods (a LeaderWorkerSet's leader's)."""
    return next(((t.get("metadata") or {}).get("labels") or {} for t in pod_templates(resource)), {})


def selects(selector: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels") or {}
    return not selector.get("matchExpressions") and all(pod_labels.get(k) == v for k, v in wanted.items())


def contains_secret(value: Any) -> bool:
    if isinstance(value, Secret):
        return True
    if isinstance(value, dict):
        return any(contains_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_secret(v) for v in value)
    return False


QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                   "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def quantity_bytes(value: Any) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]i|[kMGTP])?", str(value))
    return float(match[1]) * QUANTITY_UNITS[match[2] or ""] if match else None


def volume_size(volume: dict[str, Any], claims: dict[str, Any]) -> Any:
    """An emptyDir's sizeLimit, or the storage its claim (ephemeral template or a rendered PVC) requests."""
    if "emptyDir" in volume:
        return (volume["emptyDir"] or {}).get("sizeLimit")
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    spec = claims.get(claim) if claim else ((volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}).get("spec")
    return (((spec or {}).get("resources") or {}).get("requests") or {}).get("storage")
