"""Metrics and alerting: kube-prometheus-stack, pinned.

The seam for alert rules and dashboards: give ObservabilityArgs rule groups
and dashboards and they become a PrometheusRule and Grafana dashboard
ConfigMaps (picked up by the chart's sidecar). Every alert must carry a
runbook_url; that rule is enforced where the rules are written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import chart_namespace, labels, pinned_release
from tenantry.pins import chart

DASHBOARD_LABEL = "grafana_dashboard"


@dataclass(frozen=True)
class ObservabilityArgs:
    rule_groups: tuple[dict[str, Any], ...] = ()
    """PrometheusRule `spec.groups` entries."""
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Grafana dashboard JSON models by file name."""


class Observability(pulumi.ComponentResource):
    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:observability:Observability", name, None, opts)
        pin = chart("kube-prometheus-stack")
        self.namespace = pin.namespace
        # node-exporter needs the host's network and PID namespaces.
        namespace = chart_namespace(f"{name}-namespace", pin, "privileged", self)
        self.release = pinned_release(f"{name}-stack", pin, pin.values, self, [namespace])
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
