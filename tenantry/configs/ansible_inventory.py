"""The Ansible inventory of a stack's GPU hosts, from the Plan: one group per
node pool under `gpu_pools` (ansible/site.yml's hosts), the pool's hosts when
the spec names them, and group_vars that tell ansible/roles/gpu_node which pool
a host joins, its GPU, and the MIG configuration the GPU Operator applies."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from tenantry.catalog.gpus import gpu_type
from tenantry.configs.node_registration import CPU_POOL_GPU, kubelet_node_labels, pool_taint
from tenantry.plan import Plan
from tenantry.plan.model import PoolPlan

ALL_POOLS_GROUP = "gpu_pools"
"""The group ansible/site.yml runs against; every pool's group is its child."""


@dataclass(frozen=True, kw_only=True)
class InventoryFile:
    path: str
    """Relative to the inventory directory."""
    text: str


def group_name(pool: PoolPlan) -> str:
    """Ansible group names are identifiers (dashes warn and are rewritten), so pool names map to pool_<name>."""
    return "pool_" + re.sub(r"[^A-Za-z0-9_]", "_", pool.name)


def gpu_pools(plan: Plan) -> tuple[PoolPlan, ...]:
    return tuple(p for p in plan.pools if p.gpu != CPU_POOL_GPU)


def group_vars(pool: PoolPlan) -> dict[str, object]:
    gpu = gpu_type(pool.gpu)
    return {
        "gpu_node_pool": pool.name,
        "gpu_node_gpu": pool.gpu,
        "gpu_node_gpu_mig_capable": bool(gpu and gpu.mig_capable),
        "gpu_node_mig_config": pool.mig_config or "",
        "gpu_node_labels": kubelet_node_labels(pool),
        "gpu_node_taint": pool_taint(pool),
    }


def hosts(plan: Plan) -> dict[str, object]:
    children = {group_name(p): {"hosts": {name: None for name in p.node_names or ()}} for p in gpu_pools(plan)}
    return {"all": {"children": {ALL_POOLS_GROUP: {"children": children}}}}


CNI_PROFILES = ("calico-ipip", "calico-vxlan", "calico-bgp", "cilium-vxlan", "cilium-geneve", "cilium-native")
"""The CNI profiles the firewall role knows (ansible/roles/firewall/vars/main.yml, firewall_cni_profiles): which CNI,
and how it carries pods' traffic between nodes."""


@dataclass(frozen=True, kw_only=True)
class SiteNetworks:
    """What the Plan cannot know about a site's network, given to `tenantry inventory` (each may be left for
    group_vars): where administrators connect from, the cluster's CNI and its pod networks."""

    admin_cidrs: tuple[str, ...] = ()
    cni_profile: str = ""
    pod_cidrs: tuple[str, ...] = ()


_UNSET = {
    "firewall_admin_cidrs": ("the networks your administrators and this controller connect from", "--admin-cidr CIDR",
                             "[192.0.2.0/24]"),
    "firewall_cni_profile": (f"the cluster's CNI: {', '.join(CNI_PROFILES)}", "--cni PROFILE", "calico-ipip"),
    "firewall_pod_cidrs": ("the cluster's pod networks", "--pod-cidr CIDR", "[192.168.0.0/16]"),
}


def site_vars(networks: SiteNetworks) -> str:
    """group_vars of every GPU host: the site's networks. Each left unset is a comment saying what to write; the
    firewall role refuses to run until it is set, rather than admit SSH from nowhere or drop the pod network."""
    values = {"firewall_admin_cidrs": list(networks.admin_cidrs), "firewall_cni_profile": networks.cni_profile,
              "firewall_pod_cidrs": list(networks.pod_cidrs)}
    given = {name: value for name, value in values.items() if value}
    text = yaml.safe_dump(given, sort_keys=False) if given else ""
    for name in (n for n in values if n not in given):
        what, flag, example = _UNSET[name]
        text += (f"# {name} is not set: the firewall role refuses to run until it is. Write {what}\n"
                 f"# (tenantry inventory {flag}):\n# {name}: {example}\n")
    return text


def inventory(plan: Plan, networks: SiteNetworks = SiteNetworks()) -> tuple[InventoryFile, ...]:
    """hosts.yml, the group_vars of every GPU host (the site's networks), and one group_vars file per GPU pool. A pool
    whose nodes come prepared (no node_names in the spec) gets an empty group, with a comment saying how many hosts
    the Plan expects there."""
    header = (f"# The GPU hosts of stack {plan.stack}, written by `tenantry inventory {plan.stack}` from its Plan.\n"
              + "".join(f"# {group_name(p)}: pool {p.name}, {p.nodes} host(s) of {p.gpus_per_node} x {p.gpu}"
                        f"{'' if p.node_names else ' (not named in the spec: add them, or list them here)'}\n"
                        for p in gpu_pools(plan)))
    files = [InventoryFile(path="hosts.yml", text=header + yaml.safe_dump(hosts(plan), sort_keys=False)),
             InventoryFile(path=f"group_vars/{ALL_POOLS_GROUP}.yml",
                           text=f"# Every GPU host of stack {plan.stack}.\n" + site_vars(networks))]
    files += [InventoryFile(path=f"group_vars/{group_name(p)}.yml",
                            text=f"# Pool {p.name} of stack {plan.stack}, from its Plan.\n"
                                 + yaml.safe_dump(group_vars(p), sort_keys=False))
              for p in gpu_pools(plan)]
    return tuple(files)
