"""One tenant's namespace: quotas (no GPUs: models are reached through the
gateway only), default limits, a network policy that lets nothing in and
only DNS and the gateway out, and the tenant's gateway key, which the tenant's workloads read through a
RoleBinding to one ClusterRole shared by all tenants."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import DNS_EGRESS, TENANT_LABEL, TIER_LABEL, cores, gateway_egress, labels, mebibytes
from tenantry.plan.model import TenantPlan

KEY_SECRET = "tenantry-gateway-key"
KEY_READER_ROLE = "tenantry-gateway-key-reader"


@dataclass(frozen=True)
class TenantArgs:
    tenant: TenantPlan
    key: pulumi.Output[str]
    gateway_url: str
    gateway_namespace: str
    gateway_selector: dict[str, str]
    gateway_port: int
    key_reader: k8s.rbac.v1.ClusterRole
    """The ClusterRole (key_reader_role) the tenant's RoleBinding grants in its namespace."""


class Tenant(pulumi.ComponentResource):
    def __init__(self, name: str, args: TenantArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:tenant:Tenant", name, None, opts)
        t = args.tenant
        ns = t.namespace
        meta_labels = {**labels("tenant"), TENANT_LABEL: t.name, TIER_LABEL: t.tier}
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": ns, "labels": {**meta_labels, "pod-security.kubernetes.io/enforce": "restricted"}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        _quota_and_limits(name, t, meta_labels, in_namespace)
        _network_policies(name, ns, args, meta_labels, in_namespace)
        _gateway_key(name, ns, args, meta_labels, in_namespace)
        self.namespace = ns
        self.register_outputs({"namespace": ns})


def _quota_and_limits(name: str, t: TenantPlan, meta_labels: dict[str, str], opts: pulumi.ResourceOptions) -> None:
    """The tenant's quota (no GPUs or MIG slices, no external Services) and the defaults of containers that set
    none. Extended resources take only a requests.* quota; a resource left out of it is unlimited."""
    k8s.core.v1.ResourceQuota(
        f"{name}-quota",
        metadata={"name": "tenantry-quota", "namespace": t.namespace, "labels": meta_labels},
        spec={"hard": {
            "requests.cpu": cores(t.quota_cpu),
            # CPU may burst to twice the quota, like every platform container (deploy/common.py: resources).
            "limits.cpu": cores(2 * t.quota_cpu),
            "requests.memory": mebibytes(t.quota_memory_bytes),
            "limits.memory": mebibytes(t.quota_memory_bytes),
            "pods": str(t.quota_pods),
            **{f"requests.{resource}": "0" for resource in t.quota_gpu_resources},
            "services.loadbalancers": "0",
            "services.nodeports": "0",
        }},
        opts=opts,
    )
    k8s.core.v1.LimitRange(
        f"{name}-limits",
        metadata={"name": "tenantry-limits", "namespace": t.namespace, "labels": meta_labels},
        spec={"limits": [{
            "type": "Container",
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
            "default": {"cpu": "500m", "memory": "512Mi"},
        }]},
        opts=opts,
    )


def _network_policies(
    name: str, ns: str, args: TenantArgs, meta_labels: dict[str, str], opts: pulumi.ResourceOptions
) -> None:
    """Nothing in, and out only to DNS and the gateway: one policy over every pod, both directions. (Two, a
    default deny and an allowance, say the same; one is a tenth fewer objects per tenant to register.)"""
    k8s.networking.v1.NetworkPolicy(
        f"{name}-isolation",
        metadata={"name": "tenantry-isolation", "namespace": ns, "labels": meta_labels},
        spec={
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "egress": [DNS_EGRESS, gateway_egress(args.gateway_namespace, args.gateway_selector, args.gateway_port)],
        },
        opts=opts,
    )


def _gateway_key(
    name: str, ns: str, args: TenantArgs, meta_labels: dict[str, str], opts: pulumi.ResourceOptions
) -> None:
    """The tenant's gateway key and URL, readable by the tenant's own workloads."""
    k8s.core.v1.Secret(
        f"{name}-key",
        metadata={"name": KEY_SECRET, "namespace": ns, "labels": meta_labels},
        string_data={"api-key": args.key, "base-url": args.gateway_url},
        opts=opts,
    )
    k8s.rbac.v1.RoleBinding(
        f"{name}-key-readers",
        metadata={"name": "tenantry-gateway-key-readers", "namespace": ns, "labels": meta_labels},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KEY_READER_ROLE},
        # The tenant's own workloads, whatever service account they run as.
        subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": f"system:serviceaccounts:{ns}"}],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[args.key_reader])),
    )


def key_reader_role(name: str, opts: pulumi.ResourceOptions) -> k8s.rbac.v1.ClusterRole:
    """Reading the Secret named tenantry-gateway-key, and nothing else: one ClusterRole that every tenant's
    RoleBinding grants in the tenant's own namespace only (a RoleBinding never grants beyond its namespace).
    One Role per tenant would say the same with a thousand objects more at 1,000 tenants."""
    return k8s.rbac.v1.ClusterRole(
        f"{name}-key-reader",
        metadata={"name": KEY_READER_ROLE, "labels": labels("tenant")},
        rules=[{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [KEY_SECRET], "verbs": ["get"]}],
        opts=opts,
    )
