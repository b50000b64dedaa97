"""The cluster: its Kubernetes version and GPU node pools."""

from __future__ import annotations

from pydantic import field_validator

from tenantry.pins import supported_kubernetes
from tenantry.spec.fields import (
    KUBERNETES_VERSION_PATTERN,
    Name,
    NodeName,
    SpecModel,
    field,
)


class NodePoolSpec(SpecModel):
    """A group of identical GPU nodes."""

    name: Name = field(description="Pool name; nodes are labelled with it and engines are placed on it.")
    gpu: str = field(
        description="GPU type from the catalog: A100-40GB, A100-80GB, H100-80GB-SXM, H100-80GB-PCIe, "
        "H200-141GB, L40S-48GB, B200, or CPU (the local stack).",
    )
    gpus_per_node: int = field(description="GPUs in each node.", unit="GPUs", ge=1, le=16)
    nodes: int = field(1, description="Nodes in the pool.", unit="nodes", ge=1, le=1000)
    gpu_hour_price_usd: float = field(
        description="What one GPU costs per hour; token prices and tenant spend derive from it.",
        unit="USD per GPU-hour", gt=0, le=1000,
    )
    mig_layout: list[str] | None = field(
        None,
        description="MIG profiles carved out of every GPU of the pool (for example "
        "[3g.40gb, 2g.20gb, 2g.20gb]); omit for whole GPUs. Must be a combination the GPU accepts.",
        min_length=1, max_length=7,
    )
    node_names: list[NodeName] | None = field(
        None,
        description="Kubernetes names of the pool's nodes; tenantry labels and taints them. Omit when the "
        "nodes already carry the label tenantry.io/pool=<name> and the matching taint (Ansible sets both).",
        min_length=1, max_length=1000,
    )


class ClusterSpec(SpecModel):
    kubernetes_version: str = field(
        "1.35",
        description="Kubernetes minor version of the target cluster (quoted: \"1.35\"); manifests are "
        "validated against its schemas. Must be one every pinned component supports ({} to {}: "
        "tenantry/pins.py KUBERNETES_SUPPORT).".format(*supported_kubernetes()),
        pattern=KUBERNETES_VERSION_PATTERN,
    )
    node_pools: list[NodePoolSpec] = field(description="The cluster's GPU node pools.", min_length=1)

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_by_every_pin(cls, version: str) -> str:
        oldest, newest = supported_kubernetes()
        if not int(oldest.split(".")[1]) <= int(version.split(".")[1]) <= int(newest.split(".")[1]):
            raise ValueError(f"{version} is outside {oldest} to {newest}, the Kubernetes versions every pinned "
                             "component supports (tenantry/pins.py KUBERNETES_SUPPORT); upgrade the cluster or "
                             "pick a version in that range")
        return version
