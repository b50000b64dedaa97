"""Every alert tenantry raises, from one table, with thresholds from the Plan.

ALERTS (tenantry/monitoring/alert_table.py) names each alert once, with what
on-call reads; `alert_rule` there is the only way a rule is written.
`rule_groups` turns the Plan into Prometheus rule groups for both outlets: a
PrometheusRule on Kubernetes, the local stack's rule file. The GPU alerts are
in gpu_rules.py.

Tenant alerts are one rule each, comparing every tenant with its own recorded
objectives (tenantry/monitoring/records.py); engine, pool and gateway alerts
carry their thresholds from the Plan. Alerts reading Kubernetes' exporters
(kube-state-metrics, DCGM, CloudNativePG) have no data on the local stack and
stay quiet there; none of them fires on absent data unless it knows the
exporter runs.
"""

from __future__ import annotations

from typing import Any

import yaml

from tenantry.monitoring.alert_table import ALERTS, Alert, alert_rule, runbook_url
from tenantry.monitoring.gpu_rules import gpu_alerts
from tenantry.monitoring.records import BURN_WINDOWS, ERROR_WINDOWS, RECORDS, from_team, record_groups
from tenantry.monitoring.signals import EngineSignal, engine_signals
from tenantry.plan.model import EnginePlan, Plan

P95_ERROR_BUDGET = 0.05
"""A p95 objective lets 5 % of requests miss it: the error budget the burn rates spend."""
FAST_BURNS = (("10m", "2m", 14.4), ("6h", "30m", 6.0))
"""The paging pairs. A p95 objective's budget is 5 %, so the SRE workbook's burn of 14.4 is 72 % of requests
missing, nearly an outage: its 1h/5m pair would page a total outage 43 minutes in; 10m/2m pages it within about
9 (7.2 minutes of data, then the rule's 2). 6h/30m at 6 is the workbook's."""
SLOW_BURNS = (("1d", "2h", 3.0), ("3d", "6h", 1.0))
"""The workbook's ticket pairs: 10 % of the budget in a day, or spending it exactly as fast as it refills."""
ERROR_BURNS = (("10m", "5m", 14.4), ("1h", "5m", 14.4), ("6h", "30m", 6.0))
"""TenantErrorRateHigh's pairs, on the tenant's own max_error_rate as its budget: 10m/5m pages an outage within
about 10 minutes whatever the budget, 1h/5m and 6h/30m are the workbook's for the smaller budgets."""
MIN_REQUESTS = 20
"""A burn is judged on at least this many requests in its long window: 2 slow of 3 in a quiet hour is no
outage."""
GATEWAY_OVERHEAD_P99_SECONDS = 0.025
"""The plugin's hook at p99: past 25 ms it is a visible share of the tightest TTFT objectives."""
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
FAILED_CALLS = 3
"""Failed calls within FAILING_WINDOW that make an outage: LiteLLM's background jobs alone call PostgreSQL and
Redis every few seconds (about 50 failed calls a minute with PostgreSQL stopped on the local stack), while one
query that failed once is no outage."""
FAILING_WINDOW = "2m"
"""Over which that share is read. An outage makes every call fail (LiteLLM's background jobs call PostgreSQL and
Redis every few seconds, besides each request's calls), so two minutes of calls decide it; a 5-minute window
held the page back until failures outweighed the calls that had succeeded before (4.75 minutes after Redis
stopped, on the local stack after a busy hour) and kept it 5 minutes after the part was back."""


__all__ = ["ALERTS", "RECORDS", "Alert", "rule_file", "rule_groups", "runbook_url"]


def _burn(objective: str, pairs: tuple[tuple[str, str, float], ...]) -> str:
    """Per tenant over all its engines (a fallback's trickle is weighed with the rest), where it sent enough."""
    def ratio(window: str) -> str:
        assert window in BURN_WINDOWS
        return f'tenantry:tenant_slo_burn:rate{window}{{objective="{objective}"}}'

    return "\nor\n".join(f"({ratio(long)} > {burn * P95_ERROR_BUDGET:g}\n  and {ratio(short)} > {burn * P95_ERROR_BUDGET:g}"
                         f"\n  and on (tenant, tier) tenantry:tenant_requests:increase{long} >= {MIN_REQUESTS})"
                         for long, short, burn in pairs)


def _error_burn() -> str:
    """Each tenant's server errors and timeouts against its own max_error_rate, as a budget burnt."""
    def over(window: str, burn: float) -> str:
        assert window in ERROR_WINDOWS
        return (f"tenantry:tenant_error_ratio:rate{window}\n"
                f"    > on (tenant) group_left (tier) ({burn:g} * tenantry:tenant_objective:max_error_rate)")

    return "\nor\n".join(f"(\n  {over(long, burn)}\n  and {over(short, burn)}\n"
                         f"  and on (tenant) tenantry:tenant_answers:increase{long} >= {MIN_REQUESTS}\n)"
                         for long, short, burn in ERROR_BURNS)


def _tenant_alerts(plan: Plan) -> list[dict[str, Any]]:
    spend_left = from_team("litellm_remaining_team_budget_metric")
    hours_left = from_team("litellm_team_budget_remaining_hours_metric")
    return [
        *(alert_rule(plan, f"Tenant{label}BudgetBurnFast", _burn(objective, FAST_BURNS), wait="2m")
          for objective, label in (("ttft", "Ttft"), ("itl", "Itl"))),
        *(alert_rule(plan, f"Tenant{label}BudgetBurnSlow", _burn(objective, SLOW_BURNS), wait="15m")
          for objective, label in (("ttft", "Ttft"), ("itl", "Itl"))),
        alert_rule(plan, "TenantErrorRateHigh", _error_burn(), wait="2m"),
        *_throttled_alerts(plan),
        *(alert_rule(plan, "TenantBudgetSpent", "tenantry:tenant_budget_spent:ratio\n  >= on (tenant) group_left (tier, threshold) "
                     f'tenantry:tenant_objective:budget_alert_share{{level="{level}"}}', severity=level, wait="1m")
          for level in ("info", "warning", "critical")),
        alert_rule(plan, "TenantBudgetExhaustionProjected",
                   f"(\n  tenantry:tenant_spend_usd:rate1h * 3600 * on (tenant) max by (tenant) ({hours_left})\n"
                   f"    - on (tenant) max by (tenant) ({spend_left})\n  > 0\n)\n"
                   # Only for a rule's tier label: the objective's series adds it (and 0).
                   "+ on (tenant) group_left (tier) (0 * tenantry:tenant_objective:budget_usd)",
                   wait="30m"),
    ]


def _engine_alerts(plan: Plan, e: EnginePlan) -> list[dict[str, Any]]:
    """Engine series are selected by their scrape job, the engine's Service on Kubernetes and its
    job name on the local stack; the queue, KV cache and TTFT alerts fire on the signals KEDA scales
    autoscaled engines on (tenantry/monitoring/signals.py). An adapter that does not load is no alert of its
    own: vLLM loads the spec's adapters at start (--lora-modules, runtime loading off) and exits when one fails
    (vllm/entrypoints/openai/models/serving.py: init_static_loras raises), so it is EngineDown."""
    job = f'job="{e.name}"'
    who = {"engine": e.name, "pool": e.pool}
    signals = {s.alert: s for s in engine_signals(plan, e)}
    rules = [
        alert_rule(plan, "EngineDown", f"max by (job) (up{{{job}}}) == 0\nor absent(up{{{job}}})\n"
                   f'or max by (deployment) (kube_deployment_status_replicas_available{{deployment="{e.name}"}}) == 0',
                   wait="1m", labels=who),
        # Up and scraped, requests running, no token out: a hung model loop or device, which EngineDown misses.
        alert_rule(plan, "EngineStuck", f"max by (job) (vllm:num_requests_running{{{job}}}) > 0\n"
                   f"and on (job) sum by (job) (rate(vllm:generation_tokens_total{{{job}}}[5m])) == 0",
                   wait="5m", labels=who),
        # Some replicas up, not all: EngineDown covers none (KEDA's replica count is the spec's here). A
        # LeaderWorkerSet's groups are no Deployment: kube-state-metrics does not count them.
        alert_rule(plan, "EngineReplicasMissing",
                   f'kube_deployment_status_replicas_available{{deployment="{e.name}"}} > 0\n'
                   f'< on (deployment) kube_deployment_spec_replicas{{deployment="{e.name}"}}', wait="10m", labels=who),
        _engine_errors(plan, e, who),
        # vLLM keeps every combination of its LoRA info labels it ever set, each valued at the time it was set:
        # the newest says what waits now. Adapters waiting while the slots (max_loras) hold others, for 10 minutes.
        *([alert_rule(plan, "EngineLoraSlotsStarved",
                      f'max by (job) (vllm:lora_requests_info{{{job}, waiting_lora_adapters!=""}})\n'
                      f">= on (job) max by (job) (vllm:lora_requests_info{{{job}}})\n"
                      f"and on (job) max by (job) (vllm:lora_requests_info{{{job}}}) > time() - 120",
                      wait="10m", labels=who)] if e.lora.enabled else []),
        *(_signal_alert(plan, signals[name], who) for name in ("EngineQueueBacklog", "EngineKvCacheFull")),
        alert_rule(plan, "EnginePreemptionsRising", f"sum by (job) (rate(vllm:num_preemptions_total{{{job}}}[15m])) > 0",
                   wait="15m", labels=who),
    ]
    if "EngineTtftHigh" in signals:
        rules.append(_signal_alert(plan, signals["EngineTtftHigh"], who))
    if e.routing is not None:
        rules += _kv_routing_alerts(plan, e, who)
    return rules


def _kv_routing_alerts(plan: Plan, e: EnginePlan, who: dict[str, str]) -> list[dict[str, Any]]:
    """A kv-aware engine is reached through its Gateway's Envoy, which asks the endpoint picker for a replica. The
    engine's own scrapes go to its pods, so EngineDown misses a Gateway with no replica: every call to the engine
    then fails. The picker is configured to fail open (Envoy routes without it, to any replica of the pool), so its
    loss costs the prefix-cache and load scoring, not the service."""
    def none_available(deployment: str) -> str:
        return ("max by (namespace, deployment) (kube_deployment_status_replicas_available"
                f'{{namespace="{plan.platform.namespace}", deployment="{deployment}"}}) == 0')
    assert e.routing is not None
    return [alert_rule(plan, "InferenceGatewayDown", none_available(e.routing.gateway_deployment), wait="2m", labels=who),
            alert_rule(plan, "EndpointPickerDown", none_available(e.routing.picker_deployment), wait="10m", labels=who)]




ENGINE_ERROR_RATIO = 0.05
"""EngineErrorsHigh: the share of LiteLLM's calls to an engine that end in a server error (5xx from vLLM, or no
answer, which LiteLLM counts as 500), over 10 minutes, on at least ENGINE_ERROR_MIN_CALLS calls."""
ENGINE_ERROR_MIN_CALLS = 20


def _engine_errors(plan: Plan, e: EnginePlan, who: dict[str, str]) -> dict[str, Any]:
    """LiteLLM counts each call per deployment (model_group: the engine's name or one of its adapters'); the
    tenants' own error alerts tell who it hurt, this one which engine does it."""
    # Engine and adapter names are DNS labels (the spec refuses others): nothing in them for a regex to escape.
    groups = f'model_group=~"{"|".join((e.name, *(a.name for a in e.lora.adapters)))}"'
    calls = f"sum(increase(litellm_deployment_total_requests_total{{{groups}}}[10m]))"
    failed = f'sum(increase(litellm_deployment_failure_responses_total{{{groups}, exception_status=~"5.."}}[10m]))'
    return alert_rule(plan, "EngineErrorsHigh", f"{failed} / {calls} > {ENGINE_ERROR_RATIO:g}\n"
                      f"and {calls} >= {ENGINE_ERROR_MIN_CALLS}", wait="10m", labels=who)


def _signal_alert(plan: Plan, signal: EngineSignal, who: dict[str, str]) -> dict[str, Any]:
    return alert_rule(plan, signal.alert, f"{signal.query} > {signal.threshold:g}", wait=signal.wait, labels=who)


def _gateway_alerts(plan: Plan) -> list[dict[str, Any]]:
    gateway = 'up{job="tenantry-gateway"} == 1'
    return [
        alert_rule(plan, "GatewayReplicaDown", f"absent({gateway})", severity="critical", wait="1m"),
        alert_rule(plan, "GatewayReplicaDown", f"count({gateway}) < {plan.gateway.replicas}", severity="warning", wait="5m"),
        alert_rule(plan, "GatewayOverheadHigh", "histogram_quantile(0.99, sum by (le) "
                   f"(rate(tenantry_gateway_policy_seconds_bucket[5m]))) > {GATEWAY_OVERHEAD_P99_SECONDS:g}",
                   wait="10m"),
        alert_rule(plan, "GatewayPolicyFailSafe", "sum by (cause, engine) (rate(tenantry_gateway_failsafe_total[5m])) > 0",
                   wait="2m"),
        alert_rule(plan, "PostgresDown", f"{_failing('litellm_postgres')}\nor max by (cluster) (cnpg_collector_up) == 0\n"
                   f"or {_none_up(f'{plan.platform.namespace}/{POSTGRES_POD_MONITOR}')}", wait="2m"),
        alert_rule(plan, "PostgresSpendWritesFailing", SPEND_WRITE_FAILURES, wait="5m"),
        *_backup_alerts(plan),
        *_postgres_health_alerts(plan),
        alert_rule(plan, "RedisDown", f"{_failing('litellm_redis')}\n"
                   'or max by (deployment) (kube_deployment_status_replicas_available{deployment="tenantry-redis"}) == 0',
                   wait="2m"),
        *_redis_alerts(plan),
        alert_rule(plan, "ReconcilerJobFailed", _reconciler_failed(), wait="0m"),
    ]


REDIS_MEMORY_SHARE = 0.9
"""Of Redis's maxmemory: past it, the next writes evict."""


def _redis_alerts(plan: Plan) -> list[dict[str, Any]]:
    """Redis holds every gateway replica's limit counters and slot leases, each with a TTL, under maxmemory with
    volatile-lru (tenantry/deploy/redis.py): at the limit it evicts them, and a tenant's RPM, TPM and concurrency
    are counted from zero again, its tier's slots freed early. redis_exporter beside it (Kubernetes only: the local
    stack's Redis has no exporter) reports memory against the limit and evictions."""
    used = "max by (namespace) (redis_memory_used_bytes)"
    limit = "max by (namespace) (redis_memory_max_bytes > 0)"
    return [
        alert_rule(plan, "RedisMemoryNearLimit", f"{used} / {limit} > {REDIS_MEMORY_SHARE:g}", wait="15m"),
        alert_rule(plan, "RedisEvictingKeys", "sum by (namespace) (increase(redis_evicted_keys_total[10m])) > 0",
                   wait="5m"),
    ]


POSTGRES_LAG_SECONDS = 60
"""A replica this far behind its primary loses as much of the tenants' spend if it is promoted."""
POSTGRES_CONNECTIONS_SHARE = 0.8
"""Of max_connections: past it, a gateway scale-up or a reconnect storm meets 'too many clients'."""


def _postgres_health_alerts(plan: Plan) -> list[dict[str, Any]]:
    """The instances' own view, from CloudNativePG's default queries through tenantry's PodMonitor: a replica's
    replay lag, the primary's streaming replicas against the Plan's instances, connections against the limit."""
    job = f'job="{plan.platform.namespace}/{POSTGRES_POD_MONITOR}"'
    alerts = [
        alert_rule(plan, "PostgresConnectionsNearLimit",
                   f"sum by (pod) (cnpg_backends_total{{{job}}})\n"
                   f'/ on (pod) max by (pod) (cnpg_pg_settings_setting{{{job}, name="max_connections"}})\n'
                   f"> {POSTGRES_CONNECTIONS_SHARE:g}", wait="5m"),
    ]
    if plan.platform.postgres_instances > 1:
        alerts += [
            alert_rule(plan, "PostgresReplicaLagging",
                       f"max by (pod) (cnpg_pg_replication_lag{{{job}}}) > {POSTGRES_LAG_SECONDS}", wait="5m"),
            # The primary counts the replicas streaming from it; each replica reports 0.
            alert_rule(plan, "PostgresReplicasMissing",
                       f"max(cnpg_pg_replication_streaming_replicas{{{job}}}) < {plan.platform.postgres_instances - 1}",
                       wait="10m"),
        ]
    return alerts


BACKUP_SLACK_SECONDS = 3600
"""What a base backup may take beyond its schedule's longest gap before its absence is news."""
WAL_READY_SEGMENTS = 10
"""Finished WAL segments (16 MiB each) waiting for the archiver: a healthy archiver keeps this at 0 or 1."""


def _backup_alerts(plan: Plan) -> list[dict[str, Any]]:
    """Base backups and WAL archiving through the Barman Cloud plugin, where the spec sets a destination. The plugin
    publishes the backup times through the instances' exporter (barman_cloud_cloudnative_pg_io_*, plugin-barman-cloud
    v0.13.0 web/docs/observability.md; CloudNativePG's own cnpg_collector_last_*backup* stay 0 with the plugin);
    the archiver's backlog is CloudNativePG's (cnpg_collector_pg_wal_archive_status{value="ready"}): time since the
    last archived segment is no measure, a quiet database archives nothing for hours. No backup at all counts from
    0 where kube-state-metrics reports nodes."""
    if plan.platform.postgres_backup_destination is None:
        return []
    io = "barman_cloud_cloudnative_pg_io"
    newest = f"max by (namespace) ({io}_last_available_backup_timestamp)"
    late = plan.platform.postgres_backup_longest_gap_seconds + BACKUP_SLACK_SECONDS
    return [
        alert_rule(plan, "PostgresBackupFailed", f"max by (namespace) ({io}_last_failed_backup_timestamp)\n"
                   f"  > {newest}", wait="5m"),
        alert_rule(plan, "PostgresBackupTooOld", f"time() - (\n  max({io}_last_available_backup_timestamp)\n"
                   f"  or on () 0 * count(kube_node_labels)\n) > {late}", wait="15m"),
        alert_rule(plan, "PostgresWalArchivingFailing",
                   f'max by (namespace, pod) (cnpg_collector_pg_wal_archive_status{{value="ready"}}) > '
                   f"{WAL_READY_SEGMENTS}", wait="15m"),
        *_certificate_alerts(plan),
    ]


CERTIFICATE_RENEWAL_GRACE_SECONDS = 2 * 3600
"""How long past its renewal time a Certificate may stay unrenewed: cert-manager renews within seconds of it, a
failed attempt is retried with backoff for about an hour."""
CERTIFICATE_LAST_DAY_SECONDS = 24 * 3600


def _certificate_alerts(plan: Plan) -> list[dict[str, Any]]:
    """The certificates cert-manager issues for the Barman Cloud plugin and the CloudNativePG operator to talk over
    (installed with backups): when one expires, base backups and WAL archiving stop. cert-manager publishes each
    Certificate's renewal and expiry times (0 until issued); the certificate's namespace arrives as
    exported_namespace, the scrape's own being cert-manager's. Overdue renewal is judged against the
    Certificate's own renewal time, so it holds for any duration the plugin chose."""
    def per_certificate(metric: str) -> str:
        return f"max by (exported_namespace, name) (certmanager_certificate_{metric}_timestamp_seconds != 0)"
    return [
        alert_rule(plan, "CertificateRenewalOverdue",
                   f"time() - {per_certificate('renewal')} > {CERTIFICATE_RENEWAL_GRACE_SECONDS}", wait="15m"),
        alert_rule(plan, "CertificateExpiring",
                   f"{per_certificate('expiration')} - time() < {CERTIFICATE_LAST_DAY_SECONDS}", wait="10m"),
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
    return [alert_rule(plan, "TenantGuaranteedThrottled", f"{shed}\n{objective}", severity="critical",
                       labels={"cause": "the platform's capacity"}, wait="10m"),
            alert_rule(plan, "TenantGuaranteedThrottled", f"{own}\n{objective}", severity="warning",
                       labels={"cause": "its own limits"}, wait="10m")]


def _none_up(job: str) -> str:
    """No target of a Kubernetes scrape job answers: its instances crashed (up 0) or are gone (no target, so no
    `up` at all, where a rule on the exporter's own metrics sees nothing). Only where kube-state-metrics reports
    nodes, so never on the local stack, which has no such job."""
    return f'(max(up{{job="{job}"}}) or on () 0 * count(kube_node_labels)) == 0'


def _failing(service: str) -> str:
    """LiteLLM's calls to a service failing: at least FAILED_CALLS of them within FAILING_WINDOW, and over
    FAILING_SHARE of its calls there (its service metrics count both, though LiteLLM 1.108.7 counts PostgreSQL's
    calls only when they fail: its share is then 1 at any failure, and the count alone tells an outage from one
    failed query)."""
    failed = f"{service}_failed_requests_total[{FAILING_WINDOW}]"
    return (f"sum(increase({failed})) >= {FAILED_CALLS}\n"
            f"and sum(rate({failed}))\n  / sum(rate({service}_total_requests_total[{FAILING_WINDOW}])) "
            f"> {FAILING_SHARE:g}")


def rule_groups(plan: Plan) -> list[dict[str, Any]]:
    """The Prometheus rule groups of a Plan: its records, then its alerts."""
    return [
        *record_groups(plan),
        {"name": "tenantry-tenant-alerts", "rules": _tenant_alerts(plan)},
        {"name": "tenantry-engine-alerts", "rules": [r for e in plan.engines for r in _engine_alerts(plan, e)]},
        {"name": "tenantry-platform-alerts", "rules": _gateway_alerts(plan)},
        {"name": "tenantry-gpu-alerts", "rules": gpu_alerts(plan)},
    ]


def rule_file(plan: Plan) -> str:
    """The rule file the local stack's Prometheus loads (promtool's format)."""
    return yaml.safe_dump({"groups": rule_groups(plan)}, sort_keys=False, width=120)
