"""What depends on where the cluster runs, decided once: who installs the NVIDIA
driver and container toolkit, whether the MIG manager may reboot a node, where
the operator finds the driver (docs/decisions.md: GPU Operator settings follow
the environment), and whether tenantry installs the metrics API
(docs/decisions.md: The gateway's autoscaler reads metrics-server)."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.plan.model import ClusterPlan, GpuOperatorPlan
from tenantry.plan.notes import Notes
from tenantry.spec.cluster import MANAGED_METRICS_API
from tenantry.spec.schema import ClusterEnvironment, GpuSoftwareSource, Spec


@dataclass(frozen=True, kw_only=True)
class EnvironmentDefaults:
    driver: GpuSoftwareSource
    container_toolkit: GpuSoftwareSource
    mig_reboot: bool


ENVIRONMENT_DEFAULTS: dict[ClusterEnvironment, EnvironmentDefaults] = {
    # Hosts tenantry's Ansible (or you) prepare: the operator brings driver and toolkit,
    # and a MIG mode change is made with a GPU reset, never by rebooting someone's server.
    "bare-metal": EnvironmentDefaults(driver="operator", container_toolkit="operator", mig_reboot=False),
    # EKS accelerated AMIs ship driver and toolkit.
    "eks": EnvironmentDefaults(driver="preinstalled", container_toolkit="preinstalled", mig_reboot=True),
    # GKE installs the driver with Google's installer; the operator brings the toolkit.
    "gke": EnvironmentDefaults(driver="preinstalled", container_toolkit="operator", mig_reboot=True),
    # AKS GPU node images ship driver and toolkit.
    "aks": EnvironmentDefaults(driver="preinstalled", container_toolkit="preinstalled", mig_reboot=True),
}

CHART_DRIVER_INSTALL_DIR = "/run/nvidia/driver"
CHART_TOOLKIT_INSTALL_DIR = "/usr/local/nvidia"
CHART_RUNTIME_CLASS = "nvidia"
GKE_NVIDIA_DIR = "/home/kubernetes/bin/nvidia"
"""Where Google's driver installer puts the driver; the toolkit goes beside it (writable on GKE images)."""
GKE_CRITICAL_PODS_QUOTA = 100
"""NVIDIA's GKE page: the gpu-operator namespace's quota of pods at the critical priority classes."""
AKS_RUNTIME_CLASS = "nvidia-container-runtime"
"""The runtime handler AKS GPU images configure with their preinstalled toolkit."""


def plan_cluster(spec: Spec, notes: Notes) -> ClusterPlan:
    cluster = spec.cluster
    defaults = ENVIRONMENT_DEFAULTS[cluster.environment]
    chosen = cluster.gpu_operator
    driver = chosen.driver or defaults.driver
    toolkit = chosen.container_toolkit or defaults.container_toolkit
    mig_reboot = defaults.mig_reboot if chosen.mig_reboot is None else chosen.mig_reboot
    google_driver = cluster.environment == "gke" and driver == "preinstalled"
    carved = any(p.mig_layout for p in cluster.node_pools)
    if carved and not mig_reboot and cluster.environment != "bare-metal":
        notes.warn("cluster.gpu_operator.mig_reboot", f"false on {cluster.environment}: where a MIG mode change "
                   "needs a reboot (cloud VMs), the MIG manager stops with mig.config.state=failed instead")
    return ClusterPlan(
        environment=cluster.environment,
        gpu_operator=GpuOperatorPlan(
            driver=driver,
            container_toolkit=toolkit,
            mig_reboot=mig_reboot,
            driver_install_dir=GKE_NVIDIA_DIR if google_driver else CHART_DRIVER_INSTALL_DIR,
            toolkit_install_dir=GKE_NVIDIA_DIR if google_driver and toolkit == "operator" else CHART_TOOLKIT_INSTALL_DIR,
            runtime_class=AKS_RUNTIME_CLASS if cluster.environment == "aks" and toolkit == "preinstalled"
            else CHART_RUNTIME_CLASS,
            # GKE from 1.33 (older than any version tenantry supports) needs it.
            toolkit_runtime_config_from_file=cluster.environment == "gke" and toolkit == "operator",
            critical_pods_quota=GKE_CRITICAL_PODS_QUOTA if cluster.environment == "gke" else None,
        ),
        metrics_api=cluster.metrics_api or ("present" if cluster.environment in MANAGED_METRICS_API else "install"),
        # kubeadm gives each kubelet a self-signed serving certificate unless serverTLSBootstrap is on.
        kubelet_serving_certs=cluster.kubelet_serving_certs or (
            "self-signed" if cluster.environment == "bare-metal" else "cluster-ca"),
    )
