"""Every alert tenantry raises, from one table, with thresholds from the Plan.

ALERTS names each alert once, with what on-call reads (summary and
description, Prometheus templates over the alert's labels). `rule_groups`
turns the Plan into Prometheus rule groups for both outlets: a PrometheusRule
on Kubernetes, the local stack's rule file. `_alert` is the only way a rule
is written, so none misses its severity, its annotations or its runbook_url.

Tenant alerts are one rule each, comparing every tenant with its own recorded
objectives (tenantry/monitoring/records.py); engine, pool and gateway alerts
carry their thresholds from the Plan. Alerts reading Kubernetes' exporters
(kube-state-metrics, DCGM, CloudNativePG) have no data on the local stack and
stay quiet there; none of them fires on absent data unless it knows the
exporter runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from tenantry.monitoring.records import BURN_WINDOWS, RECORDS, from_team, record_groups
from tenantry.monitoring.signals import EngineSignal, engine_signals
from tenantry.plan.model import EnginePlan, Plan

P95_ERROR_BUDGET = 0.05
"""A p95 objective lets 5 % of requests miss it: the error budget the burn rates spend."""
FAST_BURNS = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
"""The SRE workbook's paging pairs: 2 % of a 30-day budget in an hour, 5 % in six hours."""
SLOW_BURNS = (("1d", "2h", 3.0), ("3d", "6h", 1.0))
"""Its ticket pairs: 10 % of the budget in a day, or spending it exactly as fast as it refills."""
GATEWAY_OVERHEAD_P99_SECONDS = 0.025
"""The plugin's hook at p99: past 25 ms it is a visible share of the tightest TTFT objectives."""
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
SPEND_WRITE_FAILURES = ('sum(increase(litellm_postgres_failed_requests_total{function_name="update_spend"}[3m]))'
                        " > 0")
"""LiteLLM counts a spend write that failed after its retries under its PostgreSQL service metrics, labelled with
the call (proxy/utils.py: raise_failed_update_spend_exception, ProxyLogging.failure_handler); its
litellm_batch_write_to_db_* families are registered but never written (no ServiceTypes.BATCH_WRITE_TO_DB caller in
1.108.7). The first failure creates the labelled series at 1, which increase() cannot see: the alert needs writes
failing again within every 3 minutes for 5, as an outage makes them (the gateway flushes spend every few seconds),
and one failed flush alone stays quiet."""
POSTGRES_POD_MONITOR = "tenantry-postgres-metrics"
"""The PodMonitor that scrapes CloudNativePG's instances (tenantry/deploy/postgres.py): the Prometheus Operator
labels its targets job="<namespace>/<name>" (pkg/prometheus/promcfg.go)."""
FAILING_SHARE = 0.5
"""Of the gateway's calls to PostgreSQL or Redis, the share failing that means it is unreachable."""


@dataclass(frozen=True)
class Alert:
    name: str
    severity: tuple[str, ...]
    """The severities its rules carry (one per rule: TenantBudgetSpent has one per threshold)."""
    summary: str
    description: str


ALERTS: tuple[Alert, ...] = (
    Alert("TenantTtftBudgetBurnFast", ("critical",), "{{ $labels.tenant }} is missing its time-to-first-token objective fast",
          "{{ $labels.tenant }} ({{ $labels.tier }}) on {{ $labels.engine }}: {{ $value | humanizePercentage }} of "
          "requests miss the p95 TTFT objective; at this rate its error budget is gone within days."),
    Alert("TenantTtftBudgetBurnSlow", ("warning",), "{{ $labels.tenant }} is spending its time-to-first-token budget",
          "{{ $labels.tenant }} ({{ $labels.tier }}) on {{ $labels.engine }}: {{ $value | humanizePercentage }} of "
          "requests miss the p95 TTFT objective, more than the contract's 5 % over a day or more."),
    Alert("TenantItlBudgetBurnFast", ("critical",), "{{ $labels.tenant }} is missing its inter-token-latency objective fast",
          "{{ $labels.tenant }} ({{ $labels.tier }}) on {{ $labels.engine }}: {{ $value | humanizePercentage }} of "
          "requests miss the p95 ITL objective; at this rate its error budget is gone within days."),
    Alert("TenantItlBudgetBurnSlow", ("warning",), "{{ $labels.tenant }} is spending its inter-token-latency budget",
          "{{ $labels.tenant }} ({{ $labels.tier }}) on {{ $labels.engine }}: {{ $value | humanizePercentage }} of "
          "requests miss the p95 ITL objective, more than the contract's 5 % over a day or more."),
    Alert("TenantErrorRateHigh", ("critical",), "{{ $labels.tenant }} gets more errors than its contract allows",
          "{{ $labels.tenant }} ({{ $labels.tier }}): {{ $value | humanizePercentage }} of its requests failed "
          "with a server error or timeout over 10 minutes, above its max_error_rate."),
    Alert("TenantGuaranteedThrottled", ("critical", "warning"), "Guaranteed tenant {{ $labels.tenant }} is being refused",
          "{{ $labels.tenant }}: {{ $value | humanizePercentage }} of its requests were answered 429 for "
          "{{ $labels.cause }} over 10 minutes; a guaranteed contract allows 1 %."),
    Alert("TenantBudgetSpent", ("info", "warning", "critical"), "{{ $labels.tenant }} has spent {{ $value | humanizePercentage }} of its budget",
          "{{ $labels.tenant }} ({{ $labels.tier }}) passed {{ $labels.threshold }} of its budget for the window; "
          "at 100 % the gateway refuses its requests."),
    Alert("TenantBudgetExhaustionProjected", ("warning",), "{{ $labels.tenant }} will run out of budget before its window ends",
          "{{ $labels.tenant }} ({{ $labels.tier }}): at the last hour's spend rate it needs "
          "{{ $value | printf \"%.2f\" }} USD more than it has left before the budget resets."),
    Alert("EngineDown", ("critical",), "Engine {{ $labels.engine }} is down",
          "No replica of engine {{ $labels.engine }} (pool {{ $labels.pool }}) answers: its tenants' requests "
          "fall back or fail."),
    Alert("EngineQueueBacklog", ("warning",), "Engine {{ $labels.engine }} has a sustained queue",
          "{{ $value }} requests have been waiting on {{ $labels.engine }} for 10 minutes, above the level at "
          "which admission sheds best-effort traffic."),
    Alert("EngineKvCacheFull", ("warning",), "Engine {{ $labels.engine }}'s KV cache stays full",
          "{{ $labels.engine }} uses {{ $value | humanizePercentage }} of its KV cache, above the level at "
          "which admission sheds best-effort traffic, for 15 minutes."),
    Alert("EnginePreemptionsRising", ("warning",), "Engine {{ $labels.engine }} keeps preempting requests",
          "{{ $labels.engine }} preempts {{ $value | printf \"%.2f\" }} requests a second: the KV cache is "
          "overcommitted against the Plan's sizing."),
    Alert("EngineAdapterLoadFailed", ("warning",), "Requests for adapter {{ $labels.adapter }} fail: not loaded",
          "The engine {{ $labels.engine }} answers 404 for adapter {{ $labels.adapter }}: it did not load it."),
    Alert("EngineTtftHigh", ("warning",), "Engine {{ $labels.engine }}'s p95 TTFT is over its tightest tenant objective",
          "{{ $labels.engine }}'s p95 time to first token is {{ $value | humanizeDuration }}, above the tightest "
          "objective of the tenants it serves."),
    Alert("GatewayReplicaDown", ("critical", "warning"), "Gateway replicas are down",
          "Fewer LiteLLM gateway replicas answer Prometheus than the spec's gateway.replicas (critical: none does)."),
    Alert("GatewayOverheadHigh", ("warning",), "tenantry's admission hook slows requests",
          "The tenant-policy hook's p99 is {{ $value | humanizeDuration }}."),
    Alert("GatewayPolicyFailSafe", ("warning",), "Admission runs in fail-safe ({{ $labels.cause }})",
          "The tenant-policy plugin decides without {{ $labels.cause }} for engine {{ $labels.engine }}: "
          "guaranteed tenants are admitted unchecked, spot is refused."),
    Alert("PostgresDown", ("critical",), "The gateway's PostgreSQL is unreachable",
          "Keys, budgets and spend live in PostgreSQL: most of the gateway's calls to it fail, CloudNativePG "
          "reports its instance down, or no instance of it answers Prometheus's scrape (crashed or gone)."),
    Alert("PostgresSpendWritesFailing", ("critical",), "Spend is not being written to PostgreSQL",
          "LiteLLM's spend writes keep failing after their retries ({{ $value | printf \"%.0f\" }} in the last 3 "
          "minutes): budgets and the spend view fall behind what is served."),
    Alert("RedisDown", ("critical",), "Redis, where limits are shared, is unreachable",
          "Most of the gateway's Redis calls fail, or its Deployment has no replica available: limits and the "
          "concurrency ledger are not shared; admission runs in fail-safe."),
    Alert("ReconcilerJobFailed", ("warning",), "The tenant reconciler {{ $labels.job_name }} failed",
          "The Job applying a change of tenants spent its retries, or the drift CronJob has not succeeded for three "
          "runs: teams and keys may differ from the Plan until a run succeeds."),
    Alert("GpuXidError", ("critical",), "GPU {{ $labels.gpu }} on {{ $labels.node }} reported XID {{ $value }}",
          "The driver reported a new XID error on {{ $labels.node }}, GPU {{ $labels.gpu }}, not one an "
          "application causes (13, 31, 43, 45)."),
    Alert("GpuEccErrors", ("critical",), "GPU {{ $labels.gpu }} on {{ $labels.node }} has uncorrectable ECC errors",
          "{{ $value }} double-bit ECC errors in 10 minutes on {{ $labels.node }}, GPU {{ $labels.gpu }}."),
    Alert("GpuTemperatureHigh", ("warning",), "GPU {{ $labels.gpu }} on {{ $labels.node }} runs hot",
          "{{ $value }} °C for 10 minutes on {{ $labels.node }}, GPU {{ $labels.gpu }}."),
    Alert("GpuThrottled", ("warning",), "GPU {{ $labels.gpu }} on {{ $labels.node }} is throttled for {{ $labels.reason }}",
          "The {{ $labels.reason }} limit held the clocks back {{ $value | humanizePercentage }} of the time over "
          "10 minutes."),
    Alert("MigConfigFailed", ("critical",), "MIG configuration failed on {{ $labels.node }}",
          "The GPU Operator's MIG manager reports state failed on {{ $labels.node }}."),
    Alert("NodePoolGpusMissing", ("critical",), "Pool {{ $labels.pool }} has fewer ready {{ $labels.resource }} than planned",
          "Ready nodes of pool {{ $labels.pool }} offer {{ $value }} {{ $labels.resource }}; the Plan needs "
          "{{ $labels.needed }}."),
)
_ALERT = {a.name: a for a in ALERTS}
__all__ = ["ALERTS", "RECORDS", "Alert", "rule_file", "rule_groups", "runbook_url"]


def runbook_url(plan: Plan, alert: str) -> str:
    return f"{plan.platform.runbook_base_url.rstrip('/')}/{alert}.md"


def _alert(plan: Plan, name: str, expr: str, *, wait: str, severity: str | None = None,
           labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The one way an alert rule is written; its severity is the table's (or one of them, named)."""
    alert = _ALERT[name]
    if severity is None:
        (severity,) = alert.severity
    assert severity in alert.severity, f"{name}: {severity} is not one of {alert.severity}"
    labels = labels or {}
    return {
        "alert": name, "expr": expr, "for": wait,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": _filled(alert.summary, labels), "description": _filled(alert.description, labels),
                        "runbook_url": runbook_url(plan, name)},
    }


def _filled(template: str, labels: dict[str, str]) -> str:
    """A template with the rule's own labels written in: Prometheus's $labels holds only the labels of the
    expression's result, not those the rule adds (an engine's name on its EngineDown)."""
    for label, value in labels.items():
        template = template.replace(f"{{{{ $labels.{label} }}}}", value)
    return template


def _burn(objective: str, pairs: tuple[tuple[str, str, float], ...]) -> str:
    def ratio(window: str) -> str:
        assert window in BURN_WINDOWS
        return f'tenantry:tenant_slo_miss_ratio:rate{window}{{objective="{objective}"}}'

    return "\nor\n".join(f"({ratio(long)} > {burn * P95_ERROR_BUDGET:g}\n  and {ratio(short)} > {burn * P95_ERROR_BUDGET:g})"
                         for long, short, burn in pairs)


def _tenant_alerts(plan: Plan) -> list[dict[str, Any]]:
    spend_left = from_team("litellm_remaining_team_budget_metric")
    hours_left = from_team("litellm_team_budget_remaining_hours_metric")
    return [
        *(_alert(plan, f"Tenant{label}BudgetBurnFast", _burn(objective, FAST_BURNS), wait="2m")
          for objective, label in (("ttft", "Ttft"), ("itl", "Itl"))),
        *(_alert(plan, f"Tenant{label}BudgetBurnSlow", _burn(objective, SLOW_BURNS), wait="15m")
          for objective, label in (("ttft", "Ttft"), ("itl", "Itl"))),
        _alert(plan, "TenantErrorRateHigh", "tenantry:tenant_error_ratio:rate10m\n"
               "  > on (tenant) group_left (tier) tenantry:tenant_objective:max_error_rate",
               wait="10m"),
        *_throttled_alerts(plan),
        *(_alert(plan, "TenantBudgetSpent", "tenantry:tenant_budget_spent:ratio\n  >= on (tenant) group_left (tier, threshold) "
                 f'tenantry:tenant_objective:budget_alert_share{{level="{level}"}}', severity=level, wait="1m")
          for level in ("info", "warning", "critical")),
        _alert(plan, "TenantBudgetExhaustionProjected",
               f"(\n  tenantry:tenant_spend_usd:rate1h * 3600 * on (tenant) max by (tenant) ({hours_left})\n"
               f"    - on (tenant) max by (tenant) ({spend_left})\n  > 0\n)\n"
               # Only for a rule's tier label: the objective's series adds it (and 0).
               "+ on (tenant) group_left (tier) (0 * tenantry:tenant_objective:budget_usd)",
               wait="30m"),
    ]


def _engine_alerts(plan: Plan, e: EnginePlan) -> list[dict[str, Any]]:
    """Engine series are selected by their scrape job, the engine's Service on Kubernetes and its
    job name on the local stack; the queue, KV cache and TTFT alerts fire on the signals KEDA scales
    autoscaled engines on (tenantry/monitoring/signals.py)."""
    job = f'job="{e.name}"'
    who = {"engine": e.name, "pool": e.pool}
    adapters = "|".join(a.name for a in e.lora.adapters)
    signals = {s.alert: s for s in engine_signals(plan, e)}
    rules = [
        _alert(plan, "EngineDown", f"max by (job) (up{{{job}}}) == 0\nor absent(up{{{job}}})\n"
               f'or max by (deployment) (kube_deployment_status_replicas_available{{deployment="{e.name}"}}) == 0',
               wait="1m", labels=who),
        *(_signal_alert(plan, signals[name], who) for name in ("EngineQueueBacklog", "EngineKvCacheFull")),
        _alert(plan, "EnginePreemptionsRising", f"sum by (job) (rate(vllm:num_preemptions_total{{{job}}}[15m])) > 0",
               wait="15m", labels=who),
    ]
    if adapters:
        rules.append(_alert(
            plan, "EngineAdapterLoadFailed",
            f'label_replace(sum by (model_group) (rate(litellm_deployment_failure_responses_total'
            f'{{model_group=~"{adapters}", exception_status="404"}}[5m])), "adapter", "$1", "model_group", "(.+)") > 0',
            wait="5m", labels=who))
    if "EngineTtftHigh" in signals:
        rules.append(_signal_alert(plan, signals["EngineTtftHigh"], who))
    return rules




def _signal_alert(plan: Plan, signal: EngineSignal, who: dict[str, str]) -> dict[str, Any]:
    return _alert(plan, signal.alert, f"{signal.query} > {signal.threshold:g}", wait=signal.wait, labels=who)


def _gateway_alerts(plan: Plan) -> list[dict[str, Any]]:
    gateway = 'up{job="tenantry-gateway"} == 1'
    return [
        _alert(plan, "GatewayReplicaDown", f"absent({gateway})", severity="critical", wait="1m"),
        _alert(plan, "GatewayReplicaDown", f"count({gateway}) < {plan.gateway.replicas}", severity="warning", wait="5m"),
        _alert(plan, "GatewayOverheadHigh", "histogram_quantile(0.99, sum by (le) "
               f"(rate(tenantry_gateway_policy_seconds_bucket[5m]))) > {GATEWAY_OVERHEAD_P99_SECONDS:g}",
               wait="10m"),
        _alert(plan, "GatewayPolicyFailSafe", "sum by (cause, engine) (rate(tenantry_gateway_failsafe_total[5m])) > 0",
               wait="2m"),
        _alert(plan, "PostgresDown", f"{_failing('litellm_postgres')}\nor max by (cluster) (cnpg_collector_up) == 0\n"
               f"or {_none_up(f'{plan.platform.namespace}/{POSTGRES_POD_MONITOR}')}", wait="2m"),
        _alert(plan, "PostgresSpendWritesFailing", SPEND_WRITE_FAILURES, wait="5m"),
        _alert(plan, "RedisDown", f"{_failing('litellm_redis')}\n"
               'or max by (deployment) (kube_deployment_status_replicas_available{deployment="tenantry-redis"}) == 0',
               wait="2m"),
        _alert(plan, "ReconcilerJobFailed", _reconciler_failed(), wait="0m"),
    ]


RECONCILER_CRONJOB = "tenantry-reconcile"
"""The CronJob that undoes drift every 15 minutes (tenantry/deploy/gateway.py); `pulumi up` runs a one-shot Job
tenantry-reconcile-<10 hex digits of its files> when the tenants change."""
RECONCILER_STALE_SECONDS = 45 * 60
"""Three of the CronJob's runs in a row without a success."""


def _reconciler_failed() -> str:
    """The one-shot Job's Failed condition (its retries spent: kube_job_status_failed counts failed pods, one a
    retry saved included), or the CronJob without a success for three runs (a run that failed and the next that
    succeeded is no failure left; its failed Jobs stay in the history). A CronJob that never succeeded counts from
    its creation."""
    succeeded = (f'kube_cronjob_status_last_successful_time{{cronjob="{RECONCILER_CRONJOB}"}}\n'
                 f'    or kube_cronjob_created{{cronjob="{RECONCILER_CRONJOB}"}}')
    return (f'max by (namespace, job_name) (kube_job_failed{{condition="true", '
            f'job_name=~"{RECONCILER_CRONJOB}-[0-9a-f]{{10}}"}}) > 0\n'
            f'or label_replace(\n  time() - max by (namespace, cronjob) (\n    {succeeded}\n  ) > '
            f'{RECONCILER_STALE_SECONDS},\n  "job_name", "$1", "cronjob", "(.+)")')


def _throttled_alerts(plan: Plan) -> list[dict[str, Any]]:
    """A guaranteed tenant refused past its contract's share: a page when the platform refused it (admission shed it
    for capacity), a ticket when its own limits did (RPM, TPM, concurrency: the tenant sends more than it bought)."""
    objective = "  > on (tenant) group_left (tier) tenantry:tenant_objective:max_throttled_ratio"
    shed = "tenantry:tenant_shed_ratio:rate10m"
    own = (f"(\n  tenantry:tenant_throttled_ratio:rate10m\n"
           f"    - on (tenant) ({shed} or 0 * tenantry:tenant_throttled_ratio:rate10m)\n)")
    return [_alert(plan, "TenantGuaranteedThrottled", f"{shed}\n{objective}", severity="critical",
                   labels={"cause": "the platform's capacity"}, wait="10m"),
            _alert(plan, "TenantGuaranteedThrottled", f"{own}\n{objective}", severity="warning",
                   labels={"cause": "its own limits"}, wait="10m")]


def _none_up(job: str) -> str:
    """No target of a Kubernetes scrape job answers: its instances crashed (up 0) or are gone (no target, so no
    `up` at all, where a rule on the exporter's own metrics sees nothing). Only where kube-state-metrics reports
    nodes, so never on the local stack, which has no such job."""
    return f'(max(up{{job="{job}"}}) or on () 0 * count(kube_node_labels)) == 0'


def _failing(service: str) -> str:
    """The share of LiteLLM's calls to a service that failed (its service metrics count both)."""
    return (f"sum(rate({service}_failed_requests_total[5m]))\n"
            f"  / sum(rate({service}_total_requests_total[5m])) > {FAILING_SHARE:g}")


def _gpu_alerts(plan: Plan) -> list[dict[str, Any]]:
    def per_gpu(expr: str) -> str:
        return f'label_replace({expr}, "node", "$1", "Hostname", "(.+)")'

    return [
        _alert(plan, "GpuXidError", per_gpu(f"max by (Hostname, gpu) (\n  {_fatal_xid()}\n"
                                            f"  and changes(DCGM_FI_DEV_XID_ERRORS[{XID_NEW_WINDOW}]) > 0\n)"),
               wait="0m"),
        _alert(plan, "GpuEccErrors", per_gpu("sum by (Hostname, gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]))")
               + " > 0", wait="0m"),
        _alert(plan, "GpuTemperatureHigh", per_gpu("max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)")
               + f" > {GPU_TEMPERATURE_CELSIUS}", wait="10m"),
        # Per reason: `or` between the two rates would keep only the power series (same labels once rate drops
        # the name), and the alert says which limit to look at.
        _alert(plan, "GpuThrottled", per_gpu("max by (Hostname, gpu, reason) (\n  " + "\n  or ".join(
            f'label_replace(rate({counter}[10m]), "reason", "{reason}", "", "")'
            for reason, counter in THROTTLE_COUNTERS.items()) + "\n) / 1e9") + f" > {THROTTLED_SHARE:g}",
               wait="15m"),
        _alert(plan, "MigConfigFailed", 'max by (node) (kube_node_labels{label_nvidia_com_mig_config_state="failed"})',
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
                   f'  * on (node) group_left max by (node) (kube_node_labels{{label_tenantry_io_pool="{pool}"}})\n'
                   '  * on (node) group_left max by (node) (kube_node_status_condition{condition="Ready", status="true"}))')
        rules.append(_alert(plan, "NodePoolGpusMissing", f"({offered}\n  or on () 0 * count(kube_node_labels)) < {count}",
                            wait="10m",
                            labels={"pool": pool, "resource": resource, "needed": str(count)}))
    return rules


def rule_groups(plan: Plan) -> list[dict[str, Any]]:
    """The Prometheus rule groups of a Plan: its records, then its alerts."""
    return [
        *record_groups(plan),
        {"name": "tenantry-tenant-alerts", "rules": _tenant_alerts(plan)},
        {"name": "tenantry-engine-alerts", "rules": [r for e in plan.engines for r in _engine_alerts(plan, e)]},
        {"name": "tenantry-platform-alerts", "rules": _gateway_alerts(plan)},
        {"name": "tenantry-gpu-alerts", "rules": _gpu_alerts(plan)},
    ]


def rule_file(plan: Plan) -> str:
    """The rule file the local stack's Prometheus loads (promtool's format)."""
    return yaml.safe_dump({"groups": rule_groups(plan)}, sort_keys=False, width=120)
