"""Engines whose replicas span nodes run as LeaderWorkerSet groups: the controller comes from its pinned chart
(charts/lws), installed only for a stack with such an engine (placement.pipeline_parallel above 1). Its CRDs are
applied by Pulumi from the pinned release's files (charts/lws/crds), not by Helm, which installs a chart's crds/
once and never upgrades them: a new pin then changes the CRDs on the next `pulumi up`."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from tenantry.deploy.common import applied_chart_crds, chart_namespace, pinned_release
from tenantry.pins import chart
from tenantry.plan.model import Plan

LWS = "lws"


@dataclass(frozen=True)
class EngineGroupsArgs:
    plan: Plan


class EngineGroups(pulumi.ComponentResource):
    def __init__(self, name: str, args: EngineGroupsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:engine:EngineGroups", name, None, opts)
        across_nodes = [e.name for e in args.plan.engines if e.pipeline_parallel > 1]
        self.release: pulumi.Resource | None = None
        if across_nodes:
            pin = chart(LWS)
            # Its controller meets the restricted profile with the seccomp profile charts/lws/values.yaml adds.
            namespace = chart_namespace(f"{name}-namespace", pin, "restricted", self)
            crds = applied_chart_crds(f"{name}-crd", pin, self)
            self.release = pinned_release(f"{name}-lws", pin, pin.values, self, [namespace, *crds], skip_crds=True)
        self.register_outputs({"engines": across_nodes})
