"""The GPU alerts, read from the DCGM exporter and kube-state-metrics (Kubernetes only: the local stack has no GPU,
and none of them fires on absent data)."""

from __future__ import annotations

from typing import Any

from tenantry.configs.node_registration import POOL_LABEL
from tenantry.monitoring.alert_table import alert_rule
from tenantry.monitoring.metric_labels import node_label
from tenantry.plan.model import Plan

GPU_TEMPERATURE_CELSIUS = 85
"""Below the H100/A100 slowdown temperatures (~87-90 °C): time to act before clocks drop."""
THROTTLED_SHARE = 0.2
"""A GPU held back by power or heat for a fifth of the time serves noticeably fewer tokens."""
THROTTLE_COUNTERS = {"power": "DCGM_FI_DEV_POWER_VIOLATION", "thermal": "DCGM_FI_DEV_THERMAL_VIOLATION"}
"""DCGM's time held back, per reason, in nanoseconds (dcgmlib/dcgm_fields.h; dcgm-exporter's list said "us" until
NVIDIA/dcgm-exporter#589): per second of wall time, / 1e9 is the share."""
HARMLESS_XIDS = (13, 31, 43, 45)
"""XIDs an application causes (a graphics engine exception, an MMU fault from a bad address, a channel the program
stopped, preemptive cleanup): the program's bug, reported once per fault, not the GPU failing (NVIDIA's XID
catalogue). Every other code pages."""
XID_NEW_WINDOW = "10m"
"""DCGM_FI_DEV_XID_ERRORS holds the last XID until the driver resets: only a change is a new error, and the
alert resolves this long after it."""


def gpu_alerts(plan: Plan) -> list[dict[str, Any]]:
    def per_gpu(expr: str) -> str:
        return f'label_replace({expr}, "node", "$1", "Hostname", "(.+)")'

    return [
        alert_rule(plan, "GpuXidError", per_gpu(f"max by (Hostname, gpu) (\n  {_fatal_xid()}\n"
                                            f"  and changes(DCGM_FI_DEV_XID_ERRORS[{XID_NEW_WINDOW}]) > 0\n)"),
               wait="0m"),
        alert_rule(plan, "GpuEccErrors", per_gpu("sum by (Hostname, gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]))")
                   + " > 0", wait="0m"),
        alert_rule(plan, "GpuTemperatureHigh", per_gpu("max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)")
                   + f" > {GPU_TEMPERATURE_CELSIUS}", wait="10m"),
        # Per reason: `or` between the two rates would keep only the power series (same labels once rate drops
        # the name), and the alert says which limit to look at.
        alert_rule(plan, "GpuThrottled", per_gpu("max by (Hostname, gpu, reason) (\n  " + "\n  or ".join(
            f'label_replace(rate({counter}[10m]), "reason", "{reason}", "", "")'
            for reason, counter in THROTTLE_COUNTERS.items()) + "\n) / 1e9") + f" > {THROTTLED_SHARE:g}",
               wait="15m"),
        alert_rule(plan, "MigConfigFailed", 'max by (node) (kube_node_labels{label_nvidia_com_mig_config_state="failed"})',
                   wait="5m"),
        *_pool_alerts(plan),
    ]


def _fatal_xid() -> str:
    """The XID gauge where it holds a code that is not an application's (a comparison keeps the series it holds
    for)."""
    return "DCGM_FI_DEV_XID_ERRORS > 0" + "".join(f" != {code}" for code in HARMLESS_XIDS)


def _pool_alerts(plan: Plan) -> list[dict[str, Any]]:
    """Per pool and GPU resource, what the Plan says its engines use (whole GPUs, or each MIG profile's
    slices) against what Ready nodes offer. Absent nodes count as none, once kube-state-metrics reports
    any node (so never on the local stack, whose engines request no GPU resource)."""
    needed: dict[tuple[str, str], int] = {}
    for pool in plan.pools:
        used = {s.profile: s.used for s in pool.mig_slices}
        for e in plan.engines:
            if e.pool == pool.name and e.gpu_resource:
                needed[(pool.name, e.gpu_resource)] = used[e.mig_profile] if e.mig_profile else pool.gpus_used
    rules = []
    for (pool, resource), count in sorted(needed.items()):
        metric = resource.replace(".", "_").replace("/", "_").replace("-", "_")  # kube-state-metrics' sanitising
        offered = (f'sum(kube_node_status_allocatable{{resource="{metric}"}}\n'
                   f'  * on (node) group_left max by (node) (kube_node_labels{{{node_label(POOL_LABEL)}="{pool}"}})\n'
                   '  * on (node) group_left max by (node) (kube_node_status_condition{condition="Ready", status="true"}))')
        rules.append(alert_rule(plan, "NodePoolGpusMissing", f"({offered}\n  or on () 0 * count(kube_node_labels)) < {count}",
                                wait="10m",
                                labels={"pool": pool, "resource": resource, "needed": str(count)}))
    return rules
