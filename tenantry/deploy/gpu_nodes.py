"""GPU nodes: each pool's nodes labelled, the NVIDIA GPU Operator installed
with the settings the Plan decided for where the cluster runs, and its MIG
manager told how to carve each pool.

Taints are never patched: Node.spec.taints is an atomic list under
server-side apply, so a NodePatch would own the whole list, conflict with the
kubelet or cloud that registered the node's taints, or, forced, remove them.
Nodes are registered with the pool's taint instead (docs/decisions.md: Node
taints come from registration, labels from NodePatch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from tenantry.configs.node_registration import WHOLE_GPUS, pool_node_labels
from tenantry.deploy.common import chart_namespace, labels, pinned_release
from tenantry.pins import chart
from tenantry.plan.model import GpuOperatorPlan, PoolPlan

MIG_PARTED_CONFIGMAP = "tenantry-mig-parted"
FIELD_MANAGER = "tenantry-gpu-nodes"
"""The server-side apply field manager of every NodePatch: named, so `kubectl get node
--show-managed-fields` says who owns the labels, and a stack rebuilt from scratch owns them again."""
CRITICAL_PODS_QUOTA = "tenantry-critical-pods"
"""The ResourceQuota that lets the operator's pods run at the critical priority classes (GKE)."""


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def mig_parted_config(pools: tuple[PoolPlan, ...]) -> dict[str, Any]:
    """The MIG manager's config: one named layout per carved pool (every GPU
    of its nodes the same), plus whole GPUs for everything else."""
    configs: dict[str, Any] = {WHOLE_GPUS: [{"devices": "all", "mig-enabled": False}]}
    for pool in pools:
        if pool.mig_layout and pool.mig_config:
            devices: dict[str, int] = {}
            for profile in pool.mig_layout:
                devices[profile] = devices.get(profile, 0) + 1
            configs[pool.mig_config] = [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]
    return {"version": "v1", "mig-configs": configs}


def node_patch_metadata(node: str, node_labels: dict[str, str]) -> dict[str, Any]:
    """Labels only, forced: a label map is owned key by key, so forcing takes over just
    these keys (say the GPU Operator's own mig.config default) and leaves every other
    label, and the taints, to their managers."""
    return {"name": node, "labels": node_labels,
            "annotations": {"pulumi.com/patchForce": "true", "pulumi.com/patchFieldManager": FIELD_MANAGER}}


def operator_overrides(operator: GpuOperatorPlan) -> dict[str, Any]:
    """The chart values that depend on where the cluster runs (chart v26.3.3 keys;
    docs/decisions.md: GPU Operator settings follow the environment)."""
    toolkit: dict[str, Any] = {"enabled": operator.container_toolkit == "operator",
                               "installDir": operator.toolkit_install_dir}
    if operator.toolkit_runtime_config_from_file:
        toolkit["env"] = [{"name": "RUNTIME_CONFIG_SOURCE", "value": "file"}]
    return {
        "driver": {"enabled": operator.driver == "operator"},
        "toolkit": toolkit,
        "hostPaths": {"driverInstallDir": operator.driver_install_dir},
        "operator": {"runtimeClass": operator.runtime_class},
        "migManager": {"env": [{"name": "WITH_REBOOT", "value": "true" if operator.mig_reboot else "false"}]},
    }


@dataclass(frozen=True)
class GpuNodesArgs:
    pools: tuple[PoolPlan, ...]
    mig_strategy: str
    operator: GpuOperatorPlan


class GpuNodes(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuNodesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:gpu:GpuNodes", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        gpu_pools = tuple(p for p in args.pools if p.gpu != "CPU")
        carved = tuple(p for p in gpu_pools if p.mig_layout)

        for pool in args.pools:
            node_labels = pool_node_labels(pool)
            for node in pool.node_names or ():
                k8s.core.v1.NodePatch(f"{name}-{node}", metadata=node_patch_metadata(node, node_labels), opts=child)

        self.operator: k8s.helm.v3.Release | None = None
        if gpu_pools:
            pin = chart("gpu-operator")
            # The operator's daemonsets (driver, toolkit, device plugin) need host access.
            namespace = chart_namespace(f"{name}-namespace", pin, "privileged", self)
            depends: list[pulumi.Resource] = [namespace]
            overrides = deep_merge(operator_overrides(args.operator),
                                   {"mig": {"strategy": args.mig_strategy if carved else "none"}})
            if carved:
                config = k8s.core.v1.ConfigMap(
                    f"{name}-mig-parted",
                    metadata={"name": MIG_PARTED_CONFIGMAP, "namespace": pin.namespace, "labels": labels("gpu-operator")},
                    data={"config.yaml": yaml.safe_dump(mig_parted_config(args.pools), sort_keys=True)},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
                )
                depends.append(config)
                overrides = deep_merge(overrides, {"migManager": {"config": {"name": MIG_PARTED_CONFIGMAP}}})
            if args.operator.critical_pods_quota is not None:
                depends.append(self._critical_pods_quota(name, pin.namespace, args.operator.critical_pods_quota,
                                                         namespace))
            self.operator = pinned_release(f"{name}-operator", pin, deep_merge(pin.values, overrides), self, depends)
        self.register_outputs({"mig_strategy": args.mig_strategy})

    def _critical_pods_quota(
        self, name: str, namespace: str, pods: int, namespace_resource: pulumi.Resource
    ) -> k8s.core.v1.ResourceQuota:
        """The operator's pods run at system-node-critical priority (chart values
        `operator.priorityClassName`, `daemonsets.priorityClassName`); GKE admits such pods
        outside kube-system only under a quota scoped to those classes."""
        return k8s.core.v1.ResourceQuota(
            f"{name}-critical-pods",
            metadata={"name": CRITICAL_PODS_QUOTA, "namespace": namespace, "labels": labels("gpu-operator")},
            spec={"hard": {"pods": str(pods)}, "scopeSelector": {"matchExpressions": [{
                "scopeName": "PriorityClass", "operator": "In",
                "values": ["system-node-critical", "system-cluster-critical"]}]}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace_resource]),
        )
