"""The whole platform from one Plan: GPU nodes, observability, PostgreSQL,
Redis, the engines, the gateway and one namespace per tenant, with the
network policies that keep engines reachable only from the gateway."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from tenantry.deploy import gateway as gateway_mod
from tenantry.deploy import redis as redis_mod
from tenantry.deploy.autoscaling import EngineAutoscaling, EngineAutoscalingArgs
from tenantry.deploy.engine_groups import EngineGroups, EngineGroupsArgs
from tenantry.deploy.common import COMPONENT_LABEL, PROMETHEUS_POD_LABELS, labels
from tenantry.deploy.engine import ENGINE_PRIORITY_CLASS, Engine, EngineArgs
from tenantry.deploy.gateway import GATEWAY_PRIORITY_CLASS, Gateway, GatewayArgs
from tenantry.deploy.gpu_nodes import GpuNodes, GpuNodesArgs
from tenantry.deploy.metrics_api import MetricsApi, MetricsApiArgs
from tenantry.deploy.identity import bucket_access, bucket_service_account
from tenantry.deploy.kv_routing import KvRouting, KvRoutingArgs
from tenantry.deploy.model_cache import egress_policies, fetches_from_hub, hub_token_secret
from tenantry.deploy.observability import Observability, ObservabilityArgs, configured_webhooks
from tenantry.deploy.postgres import CLUSTER_NAME, DATA_PRIORITY_CLASS, Postgres, PostgresArgs
from tenantry.deploy.redis import Redis, RedisArgs
from tenantry.deploy.tenant import Tenant, TenantArgs, key_reader_role
from tenantry.monitoring.alertmanager import alertmanager_config
from tenantry.monitoring.dashboards import dashboards
from tenantry.monitoring.rules import rule_groups
from tenantry.pins import IMAGES, chart
from tenantry.plan.model import Plan
from tenantry.configs.vllm import PORT as ENGINE_PORT

# Platform pods outrank tenants' workloads; the gateway and its data outrank
# the engines, since without them no engine is reachable anyway.
PRIORITY_CLASSES = {
    GATEWAY_PRIORITY_CLASS: (1_000_000, "tenantry's LiteLLM gateway"),
    DATA_PRIORITY_CLASS: (1_000_000, "tenantry's PostgreSQL and Redis"),
    ENGINE_PRIORITY_CLASS: (900_000, "tenantry's vLLM engines"),
}


def on_call(plan: Plan) -> ObservabilityArgs:
    """The Plan's alert and recording rules, dashboards and Alertmanager routing, delivered to the
    webhook URLs of the stack's secret config (tenantry:pageWebhookUrl, tenantry:ticketWebhookUrl)."""
    return ObservabilityArgs(rule_groups=tuple(rule_groups(plan)), dashboards=dashboards(plan),
                             alert_routing=partial(alertmanager_config, plan),
                             webhook_urls=configured_webhooks(pulumi.Config()))


@dataclass(frozen=True)
class PlatformArgs:
    plan: Plan
    hub_token: pulumi.Input[str] | None = None
    """Pulumi config tenantry:hfToken (a secret): the Hub token of the Jobs that fill the model caches from the Hub."""


class Platform(pulumi.ComponentResource):
    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:platform:Platform", name, None, opts)
        plan = args.plan
        ns = plan.platform.namespace
        child = pulumi.ResourceOptions(parent=self)
        namespace = self.namespace = self._priority_classes_and_namespace(name, ns)
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        GpuNodes(f"{name}-gpu", GpuNodesArgs(plan.pools, plan.mig_strategy, plan.cluster.gpu_operator), child)
        metrics_api = MetricsApi(f"{name}-metrics", MetricsApiArgs(plan.cluster.metrics_api,
                                                                   plan.cluster.kubelet_serving_certs), child)
        self.bucket_service_account = bucket_service_account(f"{name}-buckets", plan.platform, in_namespace)
        observability = Observability(f"{name}-observability", on_call(plan), child)
        postgres = Postgres(f"{name}-postgres", PostgresArgs(plan.platform, IMAGES["postgres"], observability.release),
                            in_namespace)
        redis = Redis(f"{name}-redis", RedisArgs(ns, IMAGES["redis"], IMAGES["redis-exporter"], observability.release),
                      in_namespace)
        hub_token = (hub_token_secret(f"{name}-hf-token", ns, args.hub_token, in_namespace)
                     if args.hub_token is not None and fetches_from_hub(plan) else None)
        groups = EngineGroups(f"{name}-engine-groups", EngineGroupsArgs(plan), child)  # engines across nodes
        engines = {
            e.name: Engine(
                f"{name}-engine-{e.name}",
                EngineArgs(e, ns, IMAGES["vllm-cpu" if e.placement == "cpu" else "vllm"], IMAGES["rclone"],
                           cache_access_mode=plan.platform.model_cache_access_mode,
                           cache_storage_class=plan.platform.model_cache_storage_class, hub_token=hub_token,
                           monitoring_release=observability.release,
                           scrape_interval_seconds=plan.gateway.engine_scrape_interval_seconds,
                           bucket_access=bucket_access(plan.platform), bucket_account=self.bucket_service_account,
                           group_release=groups.release),
                in_namespace,
            )
            for e in plan.engines
        }
        engine_urls, routing_gateways = self._scaling_and_routing(name, plan, engines, observability)
        keys = self._tenant_keys(name, plan)
        gateway = Gateway(
            f"{name}-gateway",
            GatewayArgs(
                plan=plan, namespace=ns, image=IMAGES["litellm"],
                engine_urls=engine_urls, database_url=postgres.database_url,
                redis_host=redis.host, redis_port=redis_mod.PORT, redis_password=redis.password.result,
                tenant_keys=keys, prometheus_url=observability.prometheus_url,
                monitoring_release=observability.release, metrics_release=metrics_api.release,
                waits_for=[postgres.cluster, *routing_gateways],  # LiteLLM needs the database, and calls the Gateways
            ),
            in_namespace,
        )
        key_reader = key_reader_role(f"{name}-tenant", child)
        self.tenant_namespaces = [
            Tenant(
                f"{name}-tenant-{t.name}",
                TenantArgs(t, keys[t.name], gateway.url, ns, gateway_mod.SELECTOR, gateway_mod.PORT, key_reader),
                child,
            ).namespace
            for t in plan.tenants
        ]
        self._network_policies(name, ns, observability.namespace, in_namespace)
        egress_policies(name, ns, plan.platform, in_namespace)
        self.gateway_url = gateway.url
        self.register_outputs({"gateway_url": self.gateway_url, "tenant_namespaces": self.tenant_namespaces})

    def _scaling_and_routing(self, name: str, plan: Plan, engines: dict[str, Engine],
                             observability: Observability) -> tuple[dict[str, str], list[pulumi.Resource]]:
        """Engines' autoscalers and, for kv-aware ones, their inference Gateways: the URL LiteLLM calls each at,
        and the Gateways it waits for."""
        ns = plan.platform.namespace
        EngineAutoscaling(f"{name}-autoscaling", EngineAutoscalingArgs(
            plan, ns, observability.prometheus_url, {n: e.workload for n, e in engines.items()}),
            pulumi.ResourceOptions(parent=self))
        routing = KvRouting(f"{name}-kv-routing", KvRoutingArgs(plan, ns, observability.namespace, observability.release),
                            pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]))
        return {n: routing.urls.get(n, e.url) for n, e in engines.items()}, routing.gateways

    def _priority_classes_and_namespace(self, name: str, ns: str) -> k8s.core.v1.Namespace:
        child = pulumi.ResourceOptions(parent=self)
        for class_name, (value, what) in PRIORITY_CLASSES.items():
            k8s.scheduling.v1.PriorityClass(
                f"{name}-{class_name}", metadata={"name": class_name, "labels": labels("platform")},
                value=value, global_default=False, preemption_policy="PreemptLowerPriority", description=what,
                opts=child,
            )
        return k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": ns, "labels": {**labels("platform"), "pod-security.kubernetes.io/enforce": "restricted"}},
            opts=child,
        )

    def _tenant_keys(self, name: str, plan: Plan) -> dict[str, pulumi.Output[str]]:
        """One generated gateway key per tenant, a Pulumi secret."""
        child = pulumi.ResourceOptions(parent=self)
        return {
            t.name: pulumi.Output.secret(
                random.RandomPassword(f"{name}-key-{t.name}", length=48, special=False, opts=child).result.apply(
                    lambda r: f"sk-{r}"
                )
            )
            for t in plan.tenants
        }

    def _network_policies(self, name: str, ns: str, monitoring_ns: str, opts: pulumi.ResourceOptions) -> None:
        def from_namespace(namespace: str, pods: dict[str, str] | None = None) -> dict:
            peer: dict = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
            if pods:
                peer["podSelector"] = {"matchLabels": pods}
            return peer

        prometheus = from_namespace(monitoring_ns, PROMETHEUS_POD_LABELS)
        gateway = {"podSelector": {"matchLabels": gateway_mod.SELECTOR}}
        policies = {
            # Engines: the gateway sends requests, Prometheus scrapes; tenants never reach them.
            "tenantry-engines": ({COMPONENT_LABEL: "engine"}, [
                {"from": [gateway, prometheus], "ports": [{"protocol": "TCP", "port": ENGINE_PORT}]},
            ]),
            # Gateway: tenants' namespaces, the reconciler, and Prometheus.
            "tenantry-gateway": (gateway_mod.SELECTOR, [
                {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "tenantry.io/tenant", "operator": "Exists"}]}},
                          {"podSelector": {"matchLabels": gateway_mod.RECONCILER_SELECTOR}}, prometheus],
                 "ports": [{"protocol": "TCP", "port": gateway_mod.PORT}]},
            ]),
            "tenantry-redis": (redis_mod.SELECTOR, [
                {"from": [gateway], "ports": [{"protocol": "TCP", "port": redis_mod.PORT}]},
                {"from": [prometheus], "ports": [{"protocol": "TCP", "port": redis_mod.EXPORTER_PORT}]},
            ]),
            # PostgreSQL: the gateway, the cluster's own instances (replication), the operator, Prometheus.
            "tenantry-postgres": ({"cnpg.io/cluster": CLUSTER_NAME}, [
                {"from": [gateway, {"podSelector": {"matchLabels": {"cnpg.io/cluster": CLUSTER_NAME}}},
                          from_namespace(chart("cloudnative-pg").namespace), prometheus]},
            ]),
        }
        for policy, (selector, ingress) in policies.items():
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy}",
                metadata={"name": policy, "namespace": ns, "labels": labels("platform")},
                spec={"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"], "ingress": ingress},
                opts=opts,
            )
