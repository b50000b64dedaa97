"""Engines that scale: KEDA from its pinned chart, and a ScaledObject per autoscaled engine whose
Prometheus triggers are the engine's signals (tenantry/monitoring/signals.py), the ones its alerts
fire on, with the same thresholds. Nothing is installed for a stack without autoscaled engines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import chart_namespace, labels, pinned_release
from tenantry.deploy.engine import LWS_API_VERSION
from tenantry.monitoring.signals import engine_signals
from tenantry.pins import chart
from tenantry.plan.model import EnginePlan, Plan

KEDA = "keda"


@dataclass(frozen=True)
class EngineAutoscalingArgs:
    plan: Plan
    namespace: str
    """The engines' namespace."""
    prometheus_url: str
    workloads: dict[str, pulumi.Resource]
    """Each autoscaled engine's Deployment (or LeaderWorkerSet, across nodes), by engine name."""


class EngineAutoscaling(pulumi.ComponentResource):
    def __init__(self, name: str, args: EngineAutoscalingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:autoscaling:EngineAutoscaling", name, None, opts)
        scaled = [e for e in args.plan.engines if e.autoscaling]
        if scaled:
            pin = chart(KEDA)
            # The chart's pods meet the restricted profile as they come.
            namespace = chart_namespace(f"{name}-namespace", pin, "restricted", self)
            release = pinned_release(f"{name}-keda", pin, pin.values, self, [namespace])
            for e in scaled:
                k8s.apiextensions.CustomResource(
                    f"{name}-{e.name}",
                    api_version="keda.sh/v1alpha1",
                    kind="ScaledObject",
                    metadata={"name": e.name, "namespace": args.namespace, "labels": labels("engine")},
                    spec=scaled_object_spec(args.plan, e, args.prometheus_url),
                    # The CRD comes with the release; the workload must exist to be scaled.
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[release, args.workloads[e.name]]),
                )
        self.register_outputs({"engines": [e.name for e in scaled]})


def scaled_object_spec(plan: Plan, e: EnginePlan, prometheus_url: str) -> dict[str, Any]:
    """Between the Plan's bounds on the engine's signals: the HPA adds replicas as the worst signal's ratio
    to its threshold says (metricType Value), and removes one at a time once they have stayed low for the
    Plan's scale-down window (KEDA's cooldownPeriod only governs scaling to zero, which an engine never does)."""
    assert e.autoscaling is not None
    return {
        # A LeaderWorkerSet scales by groups through its scale subresource, as a Deployment by pods.
        "scaleTargetRef": {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet", "name": e.name}
        if e.pipeline_parallel > 1 else {"apiVersion": "apps/v1", "kind": "Deployment", "name": e.name},
        "minReplicaCount": e.autoscaling.min_replicas,
        "maxReplicaCount": e.autoscaling.max_replicas,
        "pollingInterval": e.autoscaling.polling_seconds,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {
            "stabilizationWindowSeconds": e.autoscaling.scale_down_after_seconds,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": e.autoscaling.scale_down_period_seconds}],
        }}}},
        "triggers": [
            {"type": "prometheus", "name": signal.name, "metricType": "Value",
             "metadata": {"serverAddress": prometheus_url, "query": signal.query, "threshold": f"{signal.threshold:g}"}}
            for signal in engine_signals(plan, e)
        ],
    }
