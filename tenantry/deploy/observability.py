"""Metrics and alerting: kube-prometheus-stack, pinned.

The seam for alert rules, dashboards and routing: give ObservabilityArgs rule
groups, dashboards and Alertmanager's routing and they become a PrometheusRule,
Grafana dashboard ConfigMaps (picked up by the chart's sidecar) and the
release's Alertmanager configuration, whose webhook URLs stay in a Secret.
Every alert must carry a runbook_url; that rule is enforced where the rules
are written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import chart_namespace, labels, pinned_release
from tenantry.deploy.gpu_nodes import deep_merge
from tenantry.monitoring.alertmanager import HEARTBEAT, PAGE, TICKET, Webhook
from tenantry.monitoring.metric_labels import NODE_LABELS_FOR_RULES
from tenantry.pins import IMAGES, chart, chart_image_values

DASHBOARD_LABEL = "grafana_dashboard"
"""The label Grafana's dashboard sidecar looks for (charts/kube-prometheus-stack/values.yaml)."""
WEBHOOK_CONFIG = {PAGE: "pageWebhookUrl", TICKET: "ticketWebhookUrl", HEARTBEAT: "heartbeatWebhookUrl"}
"""The secret Pulumi config key (namespace `tenantry`) holding each receiver's webhook URL."""
WEBHOOK_SECRET = "tenantry-alert-webhooks"
"""The Secret in the monitoring namespace holding the webhook URLs, one key per receiver."""
WEBHOOK_MOUNT = f"/etc/alertmanager/secrets/{WEBHOOK_SECRET}"
"""Where the Prometheus Operator mounts a Secret listed in `alertmanagerSpec.secrets`. Alertmanager
reads a webhook's url_file at every notification, so a changed URL needs no restart."""


def missing_webhook_message(receiver: str) -> str:
    key = WEBHOOK_CONFIG[receiver]
    return (f"tenantry:{key} is not set: alerts routed to the {receiver} receiver are dropped. "
            f"Set it with `pulumi config set --secret tenantry:{key} <url>` and run `pulumi up` again.")


def configured_webhooks(config: pulumi.Config) -> dict[str, pulumi.Output[str]]:
    """Each receiver's webhook URL from the stack's secret config; a receiver without one is
    warned about, not refused: a cluster can run before anyone is on call."""
    urls = {}
    for receiver, key in WEBHOOK_CONFIG.items():
        url = config.get_secret(key)
        if url is None:
            pulumi.log.warn(missing_webhook_message(receiver))
        else:
            urls[receiver] = url
    return urls


CRD_UPGRADE_VALUES = {"upgradeJob": {
    "enabled": True, "forceConflicts": True,
    "image": {"busybox": chart_image_values(IMAGES["busybox"]), "kubectl": chart_image_values(IMAGES["kubectl"])}}}
"""The chart's own CRD upgrade (a pre-install and pre-upgrade hook Job that applies its CRDs server-side, off by
default at 88.5.3): Helm installs a chart's crds/ once and never upgrades them, so a new pin would run the new
operator on the old CRDs. Its two images from the pins, where the chart's defaults are busybox:latest and a kubectl
of the cluster's version."""


UNREACHABLE_CONTROL_PLANE = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
"""Components whose scrape kube-prometheus-stack switches on by default, which Prometheus cannot reach in any
cluster.environment tenantry supports: EKS, GKE and AKS run the control plane outside the cluster, and kubeadm
(bare-metal) binds the scheduler's, controller-manager's, etcd's and kube-proxy's metrics to 127.0.0.1. Left on,
KubeSchedulerDown and KubeControllerManagerDown (absent(up == 1)), KubeProxyDown and etcdMembersDown page forever.
The chart gates each scrape, its rule groups and its *Down alert on the same `<component>.enabled`
(hack/sync_prometheus_rules: AlertConditionMap, the rule groups' conditions)."""


@dataclass(frozen=True, kw_only=True)
class ObservabilityArgs:
    rule_groups: tuple[dict[str, Any], ...] = ()
    """PrometheusRule `spec.groups` entries."""
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Grafana dashboard JSON models by file name."""
    alert_routing: Callable[[Mapping[str, Webhook]], dict[str, Any]] | None = None
    """Alertmanager's configuration file given the webhook of each receiver that has a URL; None
    keeps the chart's own configuration."""
    webhook_urls: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    """Webhook URL by receiver (secrets), for the receivers that have one."""


class Observability(pulumi.ComponentResource):
    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:observability:Observability", name, None, opts)
        pin = chart("kube-prometheus-stack")
        self.namespace = pin.namespace
        # The chart's Prometheus Service, named from its release: admission and KEDA read the engines' load there.
        self.prometheus_url = f"http://kube-prometheus-stack-prometheus.{self.namespace}.svc:9090"
        # node-exporter needs the host's network and PID namespaces.
        namespace = chart_namespace(f"{name}-namespace", pin, "privileged", self)
        values = deep_merge(pin.values, {"kube-state-metrics": {
            "metricLabelsAllowlist": [f"nodes=[{','.join(NODE_LABELS_FOR_RULES)}]"]}, "crds": CRD_UPGRADE_VALUES,
            **{component: {"enabled": False} for component in UNREACHABLE_CONTROL_PLANE}})
        depends: list[pulumi.Resource] = [namespace]
        if args.alert_routing is not None:
            depends.append(self._webhook_secret(name, args.webhook_urls, namespace))
            # Helm merges this map into the chart's default configuration; every key tenantry sets
            # replaces the default's (lists are replaced whole), so only `global` and `templates` remain.
            values = deep_merge(values, {"alertmanager": {
                "config": args.alert_routing({r: Webhook(url_file=f"{WEBHOOK_MOUNT}/{r}") for r in args.webhook_urls}),
                "alertmanagerSpec": {"secrets": [WEBHOOK_SECRET]},
            }})
        self.release = pinned_release(f"{name}-stack", pin, values, self, depends)
        after_stack = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        if args.rule_groups:
            k8s.apiextensions.CustomResource(
                f"{name}-rules",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata={"name": "tenantry", "namespace": pin.namespace, "labels": labels("monitoring")},
                spec={"groups": list(args.rule_groups)},
                opts=after_stack,
            )
        for file_name, model in sorted(args.dashboards.items()):
            k8s.core.v1.ConfigMap(
                f"{name}-dashboard-{file_name.removesuffix('.json')}",
                metadata={"name": f"tenantry-dashboard-{file_name.removesuffix('.json')}", "namespace": pin.namespace,
                          "labels": {**labels("monitoring"), DASHBOARD_LABEL: "1"}},
                data={file_name: json.dumps(model, sort_keys=True)},
                opts=after_stack,
            )
        self.register_outputs({"namespace": pin.namespace})

    def _webhook_secret(self, name: str, urls: Mapping[str, pulumi.Input[str]], namespace: pulumi.Resource
                        ) -> k8s.core.v1.Secret:
        """Created even without a URL: the Alertmanager pods mount it, and a URL set later changes
        only the Secret, not the pods."""
        return k8s.core.v1.Secret(
            f"{name}-webhooks",
            metadata={"name": WEBHOOK_SECRET, "namespace": self.namespace, "labels": labels("monitoring")},
            string_data={receiver: pulumi.Output.secret(url) for receiver, url in urls.items()},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
