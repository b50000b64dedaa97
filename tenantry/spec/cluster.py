"""The cluster: where it runs, its Kubernetes version, its GPU node pools and how
the GPU Operator and the metrics API meet them."""

from __future__ import annotations

from pydantic import field_validator

from tenantry.pins import supported_kubernetes
from tenantry.spec.fields import (
    KUBERNETES_VERSION_PATTERN,
    ClusterEnvironment,
    GpuSoftwareSource,
    KubeletServingCerts,
    MetricsApiSource,
    Name,
    NodeName,
    SpecModel,
    field,
)


MANAGED_METRICS_API: tuple[ClusterEnvironment, ...] = ("gke", "aks")
"""Environments whose clusters always run their own metrics-server: `present` there, `install` elsewhere."""

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
        description="Kubernetes names of the pool's nodes; tenantry labels them "
        "(node-restriction.kubernetes.io/tenantry-pool=<name>, which no kubelet may set on its own node, and the MIG "
        "layout). tenantry never patches taints: register the nodes with the taint "
        "tenantry.io/pool=<name>:NoSchedule (kubelet registerWithTaints, or the node pool's taints; Ansible does). "
        "Omit only when a cluster admin labels the nodes (kubectl label node).",
        min_length=1, max_length=1000,
    )


class GpuOperatorSpec(SpecModel):
    """How the NVIDIA GPU Operator meets the GPU nodes. Every field left out follows
    cluster.environment (docs/decisions.md: GPU Operator settings follow the environment)."""

    driver: GpuSoftwareSource | None = field(
        None,
        description="Who installs the NVIDIA driver: operator (its driver container) or preinstalled (the node "
        "image has it). Default: operator on bare-metal; preinstalled on eks (EKS accelerated AMIs), gke (Google's "
        "driver installer) and aks (AKS GPU node images).",
    )
    container_toolkit: GpuSoftwareSource | None = field(
        None,
        description="Who installs the NVIDIA Container Toolkit: operator or preinstalled. Default: operator on "
        "bare-metal and gke; preinstalled on eks and aks, whose GPU images ship it.",
    )
    mig_reboot: bool | None = field(
        None,
        description="Whether the MIG manager may reboot a node when a MIG mode change does not take effect "
        "without one (its WITH_REBOOT); cloud VMs need it. Default: false on bare-metal, true on eks, gke and aks.",
    )


class ClusterSpec(SpecModel):
    environment: ClusterEnvironment = field(
        "bare-metal",
        description="Where the cluster runs: bare-metal (nodes you prepare yourself), eks, gke or aks. Decides the "
        "defaults of gpu_operator and metrics_api. On gke, GPU node pools need the node label "
        "gke-no-default-nvidia-gpu-device-plugin=true (only the operator's device plugin runs) and Google's driver "
        "installer, as NVIDIA's GKE page describes.",
    )
    kubernetes_version: str = field(
        "1.35",
        description="Kubernetes minor version of the target cluster (quoted: \"1.35\"); manifests are "
        "validated against its schemas. Must be one every pinned component supports ({} to {}: "
        "tenantry/pins.py KUBERNETES_SUPPORT).".format(*supported_kubernetes()),
        pattern=KUBERNETES_VERSION_PATTERN,
    )
    node_pools: list[NodePoolSpec] = field(description="The cluster's GPU node pools.", min_length=1)
    gpu_operator: GpuOperatorSpec = field(
        default_factory=GpuOperatorSpec,
        description="How the NVIDIA GPU Operator meets the nodes (defaults follow environment).",
    )
    metrics_api: MetricsApiSource | None = field(
        None,
        description="The resource metrics API (metrics.k8s.io) the gateway's autoscaler reads: install (tenantry "
        "installs metrics-server, pinned) or present (the cluster serves it already; a second metrics-server would "
        "contend for the APIService v1beta1.metrics.k8s.io, so install is refused on gke and aks). Default: present on "
        "gke and aks, install on bare-metal and eks.",
    )
    kubelet_serving_certs: KubeletServingCerts | None = field(
        None,
        description="Who signs the kubelets' serving certificates, which metrics-server verifies when it scrapes "
        "them: cluster-ca (kubelets with serverTLSBootstrap and their CSRs approved; the managed clouds) or "
        "self-signed (kubeadm's default), with which tenantry's metrics-server runs with --kubelet-insecure-tls, as "
        "its README says, or it fails its readiness and `pulumi up` its Helm wait. Default: cluster-ca on eks, gke "
        "and aks, self-signed on bare-metal.",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_by_every_pin(cls, version: str) -> str:
        oldest, newest = supported_kubernetes()
        if not int(oldest.split(".")[1]) <= int(version.split(".")[1]) <= int(newest.split(".")[1]):
            raise ValueError(f"{version} is outside {oldest} to {newest}, the Kubernetes versions every pinned "
                             "component supports (tenantry/pins.py KUBERNETES_SUPPORT); upgrade the cluster or "
                             "pick a version in that range")
        return version
