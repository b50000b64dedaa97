"""The resource metrics API (metrics.k8s.io) that the gateway's autoscaler reads:
metrics-server from its pinned chart where the Plan says to install it, nothing
where the cluster serves the API already, since a second metrics-server would
contend for the one APIService v1beta1.metrics.k8s.io (docs/decisions.md: The
gateway's autoscaler reads metrics-server)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import chart_namespace, pinned_release
from tenantry.pins import chart
from tenantry.plan.model import KubeletServingCerts, MetricsApiSource

METRICS_SERVER = "metrics-server"


INSECURE_KUBELET_TLS = "--kubelet-insecure-tls"
"""metrics-server's flag for kubelets whose serving certificates the cluster CA did not sign (its README's
requirements; the chart appends `args` to its defaultArgs)."""


@dataclass(frozen=True)
class MetricsApiArgs:
    source: MetricsApiSource
    kubelet_serving_certs: KubeletServingCerts


class MetricsApi(pulumi.ComponentResource):
    def __init__(self, name: str, args: MetricsApiArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:metrics:MetricsApi", name, None, opts)
        self.release: k8s.helm.v3.Release | None = None
        """The release that serves the API, for autoscalers to wait on; None when the cluster serves it."""
        if args.source == "install":
            pin = chart(METRICS_SERVER)
            # The chart's pods meet the restricted profile as they come.
            namespace = chart_namespace(f"{name}-namespace", pin, "restricted", self)
            values = {**pin.values, **({"args": [INSECURE_KUBELET_TLS]}
                                       if args.kubelet_serving_certs == "self-signed" else {})}
            self.release = pinned_release(f"{name}-server", pin, values, self, [namespace])
        self.register_outputs({"source": args.source})
