"""Every alert tenantry raises, named once: what on-call reads (summary and description, Prometheus templates over
the alert's labels) and the severities its rules carry. `alert_rule` is the only way a rule is written, so none
misses its severity, its annotations or its runbook_url (tenantry/monitoring/rules.py, gpu_rules.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenantry.plan.model import Plan


@dataclass(frozen=True)
class Alert:
    name: str
    severity: tuple[str, ...]
    """The severities its rules carry (one per rule: TenantBudgetSpent has one per threshold)."""
    summary: str
    description: str


ALERTS: tuple[Alert, ...] = (
    Alert("TenantTtftBudgetBurnFast", ("critical",), "{{ $labels.tenant }} is missing its time-to-first-token objective fast",
          "{{ $labels.tenant }} ({{ $labels.tier }}): {{ $value | humanizePercentage }} of its requests, on all its "
          "engines, miss the p95 TTFT objective; at this rate its error budget is gone within days."),
    Alert("TenantTtftBudgetBurnSlow", ("warning",), "{{ $labels.tenant }} is spending its time-to-first-token budget",
          "{{ $labels.tenant }} ({{ $labels.tier }}): {{ $value | humanizePercentage }} of its requests, on all its "
          "engines, miss the p95 TTFT objective, more than the contract's 5 % over a day or more."),
    Alert("TenantItlBudgetBurnFast", ("critical",), "{{ $labels.tenant }} is missing its inter-token-latency objective fast",
          "{{ $labels.tenant }} ({{ $labels.tier }}): {{ $value | humanizePercentage }} of its requests, on all its "
          "engines, miss the p95 ITL objective; at this rate its error budget is gone within days."),
    Alert("TenantItlBudgetBurnSlow", ("warning",), "{{ $labels.tenant }} is spending its inter-token-latency budget",
          "{{ $labels.tenant }} ({{ $labels.tier }}): {{ $value | humanizePercentage }} of its requests, on all its "
          "engines, miss the p95 ITL objective, more than the contract's 5 % over a day or more."),
    Alert("TenantErrorRateHigh", ("critical",), "{{ $labels.tenant }} gets more errors than its contract allows",
          "{{ $labels.tenant }} ({{ $labels.tier }}): {{ $value | humanizePercentage }} of its requests failed "
          "with a server error or timeout, burning its max_error_rate 6 to 14.4 times as fast as it allows."),
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
    Alert("EngineStuck", ("critical",), "Engine {{ $labels.engine }} holds requests and generates nothing",
          "{{ $labels.engine }} has requests running and has generated no token for 5 minutes: it answers its "
          "health checks and scrapes, but its tenants' requests hang."),
    Alert("EngineReplicasMissing", ("warning",), "Engine {{ $labels.engine }} runs fewer replicas than planned",
          "{{ $labels.engine }} has had only {{ $value }} replicas available for 10 minutes, fewer than its Deployment "
          "asks for: it serves its tenants with less capacity than the Plan reserved for them."),
    Alert("InferenceGatewayDown", ("critical",), "Engine {{ $labels.engine }}'s inference Gateway has no replica",
          "The Gateway in front of {{ $labels.engine }} (pool {{ $labels.pool }}) has had no replica available for 2 "
          "minutes: every call to the engine fails, its tenants' requests fall back or fail although its replicas "
          "are up."),
    Alert("EndpointPickerDown", ("warning",), "Engine {{ $labels.engine }}'s endpoint picker has no replica",
          "The endpoint picker of {{ $labels.engine }} has had no replica available for 10 minutes: its Gateway "
          "routes without it (fail-open) to any replica, losing prefix-cache and load-aware routing."),
    Alert("EngineErrorsHigh", ("warning",), "Engine {{ $labels.engine }} answers with server errors",
          "{{ $value | humanizePercentage }} of the gateway's calls to {{ $labels.engine }} (and its adapters) ended "
          "in a server error or no answer over 10 minutes."),
    Alert("EngineLoraSlotsStarved", ("warning",), "Adapters wait for a LoRA slot on {{ $labels.engine }}",
          "{{ $labels.engine }} has had adapters' requests waiting for one of its LoRA slots (max_loras) for 10 "
          "minutes while other adapters hold them: those tenants queue behind the others."),
    Alert("EngineQueueBacklog", ("warning",), "Engine {{ $labels.engine }} has a sustained queue",
          "{{ $value }} requests have been waiting on {{ $labels.engine }} for 10 minutes, above the level at "
          "which admission sheds best-effort traffic."),
    Alert("EngineKvCacheFull", ("warning",), "Engine {{ $labels.engine }}'s KV cache stays full",
          "{{ $labels.engine }} uses {{ $value | humanizePercentage }} of its KV cache, above the level at "
          "which admission sheds best-effort traffic, for 15 minutes."),
    Alert("EnginePreemptionsRising", ("warning",), "Engine {{ $labels.engine }} keeps preempting requests",
          "{{ $labels.engine }} preempts {{ $value | printf \"%.2f\" }} requests a second: the KV cache is "
          "overcommitted against the Plan's sizing."),
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
    Alert("PostgresBackupFailed", ("warning",), "PostgreSQL's latest base backup failed",
          "The Barman Cloud plugin's last base backup of the gateway's PostgreSQL failed after its last good one: "
          "the next scheduled one must succeed, or point-in-time recovery ages."),
    Alert("PostgresBackupTooOld", ("critical",), "PostgreSQL has no recent base backup",
          "The newest base backup of the gateway's PostgreSQL is {{ $value | humanizeDuration }} old, longer than "
          "its schedule's longest gap and an hour: scheduled backups are not happening."),
    Alert("PostgresWalArchivingFailing", ("critical",), "PostgreSQL cannot archive its WAL on {{ $labels.pod }}",
          "{{ $value }} finished WAL segments on {{ $labels.pod }} wait to be archived: point-in-time recovery "
          "stops at the last archived one, and PostgreSQL keeps every unarchived segment on its volume until it "
          "fills."),
    Alert("CertificateRenewalOverdue", ("warning",), "Certificate {{ $labels.name }} was not renewed when due",
          "cert-manager has not renewed {{ $labels.exported_namespace }}/{{ $labels.name }} for "
          "{{ $value | humanizeDuration }} past its renewal time: the TLS between CloudNativePG and its backup "
          "plugin stops when it expires."),
    Alert("CertificateExpiring", ("critical",), "Certificate {{ $labels.name }} expires within a day",
          "{{ $labels.exported_namespace }}/{{ $labels.name }} expires in {{ $value | humanizeDuration }}: then "
          "base backups and WAL archiving stop, and the spend a lost node takes with it is unrecoverable."),
    Alert("PostgresReplicaLagging", ("warning",), "PostgreSQL replica {{ $labels.pod }} lags its primary",
          "{{ $labels.pod }} has replayed nothing of the last {{ $value | humanizeDuration }} of the primary's WAL for "
          "5 minutes: a failover to it now would lose that much of keys, teams and spend."),
    Alert("PostgresReplicasMissing", ("warning",), "PostgreSQL runs without all its replicas",
          "The primary has had {{ $value }} replicas streaming from it for 10 minutes, fewer than the Plan's "
          "instances ask for: one more failure and the gateway's database has no standby."),
    Alert("PostgresConnectionsNearLimit", ("warning",), "PostgreSQL {{ $labels.pod }} nears its connection limit",
          "{{ $labels.pod }} has {{ $value | humanizePercentage }} of max_connections in use: a gateway scale-up "
          "or a reconnect storm would be refused with 'too many clients'."),
    Alert("RedisDown", ("critical",), "Redis, where limits are shared, is unreachable",
          "Most of the gateway's Redis calls fail, or its Deployment has no replica available: limits and the "
          "concurrency ledger are not shared; admission runs in fail-safe."),
    Alert("RedisMemoryNearLimit", ("warning",), "Redis is near its memory limit",
          "Redis uses {{ $value | humanizePercentage }} of its maxmemory: at the limit it evicts the tenants' limit "
          "counters and slot leases, so limits are counted from zero again."),
    Alert("RedisEvictingKeys", ("warning",), "Redis evicts keys",
          "Redis has evicted {{ $value }} keys in 10 minutes: tenants' RPM, TPM and concurrency counters were lost "
          "and count from zero, and their tiers' slots were freed early."),
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


def runbook_url(plan: Plan, alert: str) -> str:
    return f"{plan.platform.runbook_base_url.rstrip('/')}/{alert}.md"


def alert_rule(plan: Plan, name: str, expr: str, *, wait: str, severity: str | None = None,
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
