"""What a GPU node carries to be found by its pool's engines: the labels and the
taint, the same for the nodes Pulumi patches (deploy/gpu_nodes.py) and the
hosts Ansible registers (configs/ansible_inventory.py)."""

from __future__ import annotations

from tenantry.plan.model import PoolPlan

RESTRICTED_PREFIX = "node-restriction.kubernetes.io/"
"""Node labels under this prefix are set by the platform, never by a node: Kubernetes' NodeRestriction admission
refuses them from a kubelet's own credentials, so a node (or whoever holds its kubelet's credentials) cannot put
itself in a pool or dedicate itself to a tenant and attract the engines that select it."""
POOL_LABEL = RESTRICTED_PREFIX + "tenantry-pool"
"""The pool a node serves, which engines select."""
DEDICATED_LABEL = RESTRICTED_PREFIX + "tenantry-dedicated-to"
"""On the nodes of a pool dedicated to one tenant (isolation: dedicated-node); the engines of a dedicated pool
select it beside the pool label."""
POOL_TAINT_KEY = "tenantry.io/pool"
"""The taint's key: a taint only keeps pods off, so the kubelet may register it (registerWithTaints)."""
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
WHOLE_GPUS = "all-disabled"
"""mig-parted's configuration for nodes whose GPUs stay whole."""
CPU_POOL_GPU = "CPU"
"""The local stack's pool type: no GPU, so no MIG layout to apply."""


def pool_node_labels(pool: PoolPlan) -> dict[str, str]:
    """The pool label engines select (and the tenant of a dedicated pool), and on GPU pools the MIG layout the
    GPU Operator applies (whole GPUs included, so its mig-manager never picks a default of its own). The platform
    sets them (deploy/gpu_nodes.py); kubelet_node_labels are those a node may register itself."""
    node_labels = {POOL_LABEL: pool.node_label}
    if pool.dedicated_to:
        node_labels[DEDICATED_LABEL] = pool.dedicated_to
    if pool.gpu != CPU_POOL_GPU:
        node_labels[MIG_CONFIG_LABEL] = pool.mig_config or WHOLE_GPUS
    return node_labels


def kubelet_node_labels(pool: PoolPlan) -> dict[str, str]:
    """The pool's labels a kubelet may register its node with (Ansible's --node-labels): all but the restricted
    ones, which NodeRestriction refuses from a kubelet (and the kubelet refuses to start with)."""
    return {k: v for k, v in pool_node_labels(pool).items() if not k.startswith(RESTRICTED_PREFIX)}


def pool_taint(pool: PoolPlan) -> str:
    """The taint nodes register with (docs/decisions.md: Node taints come from registration, labels from
    NodePatch), which engines of the pool tolerate."""
    return f"{POOL_TAINT_KEY}={pool.node_label}:NoSchedule"
