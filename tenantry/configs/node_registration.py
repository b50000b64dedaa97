"""What a GPU node carries to be found by its pool's engines: the labels and the
taint, the same for the nodes Pulumi patches (deploy/gpu_nodes.py) and the
hosts Ansible registers (configs/ansible_inventory.py)."""

from __future__ import annotations

from tenantry.plan.model import PoolPlan

POOL_LABEL = "tenantry.io/pool"
DEDICATED_LABEL = "tenantry.io/dedicated-to"
"""On the nodes of a pool dedicated to one tenant (isolation: dedicated-node), and on the engines that serve one
tenant alone; the engines of a dedicated pool select it beside the pool label."""
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
WHOLE_GPUS = "all-disabled"
"""mig-parted's configuration for nodes whose GPUs stay whole."""
CPU_POOL_GPU = "CPU"
"""The local stack's pool type: no GPU, so no MIG layout to apply."""


def pool_node_labels(pool: PoolPlan) -> dict[str, str]:
    """The pool label engines select (and the tenant of a dedicated pool), and on GPU pools the MIG layout the
    GPU Operator applies (whole GPUs included, so its mig-manager never picks a default of its own)."""
    node_labels = {POOL_LABEL: pool.node_label}
    if pool.dedicated_to:
        node_labels[DEDICATED_LABEL] = pool.dedicated_to
    if pool.gpu != CPU_POOL_GPU:
        node_labels[MIG_CONFIG_LABEL] = pool.mig_config or WHOLE_GPUS
    return node_labels


def pool_taint(pool: PoolPlan) -> str:
    """The taint nodes register with (docs/decisions.md: Node taints come from registration, labels from
    NodePatch), which engines of the pool tolerate."""
    return f"{POOL_LABEL}={pool.node_label}:NoSchedule"
