"""Every alert on both sides of its threshold and of its `for`, as Prometheus
evaluates the rules (promtool's rule unit tests): with series that break the
contract it is quiet until `for` has passed, then fires with exactly the
expected labels; with series just on the right side of the threshold it never
fires. Series start at 0 and every rule's condition holds from the second
sample (1m) unless a case says otherwise, so an alert with `for: F` is still
pending at F - 1m and firing at F + 3m.

A test that the table covers every alert keeps a new alert from going
untested."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from tenantry.monitoring import rules
from tests.unit.test_alert_rules import _rules, _unit_test

MINUTES = 60
"""How long each synthetic series runs: past the longest `for` (30m) and the latest start of a condition."""


def counter(per_minute: float) -> str:
    return f"0+{per_minute:g}x{MINUTES}"


def gauge(value: float) -> str:
    return f"{value:g}x{MINUTES}"


@dataclass(frozen=True)
class Case:
    alert: str
    broken: dict[str, str]
    """series -> promtool values that break the contract"""
    healthy: dict[str, str]
    """the same series just on the right side of the threshold"""
    fired: list[dict[str, str]]
    """the firing alerts' labels (besides alertname)"""
    stack: str = "local"
    shared: dict[str, str] = field(default_factory=dict)
    """series both sides have"""
    holds: tuple[int, int] = (0, 1)
    """The first and the last minute at which the broken condition may start to hold: a gauge at 0, a rate
    from its second sample; a threshold on a rate over a window longer than the data so far later, as
    Prometheus neither extrapolates a counter below zero nor reads a rate from samples it lacks."""


ACME = 'tenant="acme", tier="guaranteed", engine="tiny"'
ACME_ALERT = {"tenant": "acme", "tier": "guaranteed"}
TINY = {"engine": "tiny", "pool": "local", "job": "tiny"}
LLAMA_70B = {"engine": "llama-70b", "pool": "h200", "namespace": "tenantry"}
REDIS, TENANTRY_NS = 'job="tenantry-redis-metrics", namespace="tenantry"', {"namespace": "tenantry"}
CERTIFICATE = {"exported_namespace": "cnpg-system", "name": "barman-cloud-server"}
GPU = 'Hostname="gpu-0", gpu="0"'
GPU_1 = 'Hostname="gpu-0", gpu="1"'
GPU_ALERT = {"Hostname": "gpu-0", "gpu": "0", "node": "gpu-0"}


def _available(name: str, replicas: int, ns: str = "tenantry") -> dict[str, str]:
    return {f'kube_deployment_status_replicas_available{{namespace="{ns}", deployment="{name}"}}': gauge(replicas)}


def _redis(used_mib: int) -> dict[str, str]:
    return {f"redis_memory_{kind}_bytes{{{REDIS}}}": gauge(mib * 2**20)
            for kind, mib in (("used", used_mib), ("max", 400))}


def _certificate(time: str, at: int, name: str = "barman-cloud-server") -> dict[str, str]:
    labels = f'job="cert-manager", exported_namespace="cnpg-system", name="{name}"'  # the Certificate's namespace
    return {f"certmanager_certificate_{time}_timestamp_seconds{{{labels}}}": gauge(at)}


def _lora(waiting: str, running: str) -> str:
    return (f'vllm:lora_requests_info{{job="tiny", max_lora="1", waiting_lora_adapters="{waiting}", '
            f'running_lora_adapters="{running}"}}')


def _slo(objective: str, missed_per_10: float) -> dict[str, str]:
    return {f"tenantry_tenant_requests_total{{{ACME}}}": counter(10),
            f'tenantry_tenant_slo_misses_total{{{ACME}, objective="{objective}"}}': counter(missed_per_10)}


def _requests(per_minute: dict[str, float], team: str = "acme") -> dict[str, str]:
    return {f'litellm_proxy_total_requests_metric_total{{team_alias="{team}", status_code="{s}"}}': counter(n)
            for s, n in per_minute.items()}


def _shed(per_minute: float, tenant: str = "acme", tier: str = "guaranteed") -> dict[str, str]:
    return {f'tenantry_gateway_shed_total{{tenant="{tenant}", tier="{tier}", reason="saturated"}}': counter(per_minute)}


def _histogram(name: str, labels: str, counts: dict[str, float]) -> dict[str, str]:
    return {f'{name}_bucket{{{labels}, le="{le}"}}': counter(n) for le, n in counts.items()}


def _service(service: str, failed: float, total: float) -> dict[str, str]:
    return {f"{service}_failed_requests_total": counter(failed), f"{service}_total_requests_total": counter(total)}


def _one_failed_call(service: str) -> dict[str, str]:
    """One call failed at minute 2, and none before or after: LiteLLM counts PostgreSQL's calls only when they
    fail, so its total is its failures (a share of 1)."""
    once = f"0 0 1x{MINUTES - 2}"
    return {f"{service}_failed_requests_total": once, f"{service}_total_requests_total": once}


KSM = {'kube_node_labels{node="gpu-0", label_node_restriction_kubernetes_io_tenantry_pool="h100"}': gauge(1)}
"""kube-state-metrics reporting a node: the stack runs on a cluster."""


def _postgres_scrape(up: int) -> dict[str, str]:
    return {'up{job="tenantry/tenantry-postgres-metrics", pod="tenantry-postgres-1"}': gauge(up)}


def _pg(metric: str, instance: int, labels: str = "") -> str:
    """A series of CloudNativePG's exporter as tenantry's PodMonitor scrapes it from instance N."""
    return (f'{metric}{{job="tenantry/tenantry-postgres-metrics", pod="tenantry-postgres-{instance}"'
            f'{", " + labels if labels else ""}}}')


def _one_shot_job(failed: bool) -> dict[str, str]:
    job = 'namespace="tenantry", job_name="tenantry-reconcile-0123abcdef"'
    return {f'kube_job_failed{{{job}, condition="true"}}': gauge(int(failed)),
            f'kube_job_failed{{{job}, condition="false"}}': gauge(int(not failed)),
            f"kube_job_status_failed{{{job}}}": gauge(1 if not failed else 7)}


def _reconciler_cronjob(every: int | None) -> dict[str, str]:
    """kube-state-metrics' view of the drift CronJob created at 0: its last success every `every` minutes
    (None: never, so the series is absent)."""
    cronjob = 'namespace="tenantry", cronjob="tenantry-reconcile"'
    series = {f"kube_cronjob_created{{{cronjob}}}": gauge(0)}
    if every:
        series[f"kube_cronjob_status_last_successful_time{{{cronjob}}}"] = " ".join(
            str(minute // every * every * 60) for minute in range(MINUTES))
    return series


def _backups(available: float, failed: float | None = None) -> dict[str, str]:
    """The Barman Cloud plugin's backup times, as the instance's exporter publishes them."""
    io, pod = "barman_cloud_cloudnative_pg_io", 'namespace="tenantry", pod="tenantry-postgres-1"'
    series = {f"{io}_last_available_backup_timestamp{{{pod}}}": gauge(available)}
    if failed is not None:
        series[f"{io}_last_failed_backup_timestamp{{{pod}}}"] = gauge(failed)
    return series


def _wal_ready(segments: int) -> dict[str, str]:
    pod = 'namespace="tenantry", pod="tenantry-postgres-1"'
    return {f'cnpg_collector_pg_wal_archive_status{{{pod}, value="ready"}}': gauge(segments),
            f'cnpg_collector_pg_wal_archive_status{{{pod}, value="done"}}': gauge(40)}


def _db_failures(call: str, every: int) -> dict[str, str]:
    """LiteLLM's failed-PostgreSQL-call counter for one call, as prometheus_services.py labels it (the service's
    own label, the error's class, the call), absent until the first failure, one more every `every` minutes."""
    values = " ".join(str(1 + minute // every) for minute in range(MINUTES - 2))
    return {f'litellm_postgres_failed_requests_total{{postgres="postgres", error_class="ConnectionError", '
            f'function_name="{call}"}}': f"_ _ {values}"}


def _xid(before: int, after: int, at: int = 3) -> str:
    """DCGM's last-XID gauge: `before` until minute `at`, then `after` for good (it holds until a driver reset)."""
    return f"{before}x{at - 1} {after}x{MINUTES - at}"


def _burn_cases(objective: str, label: str) -> list[Case]:
    labels = {**ACME_ALERT, "objective": objective}
    return [
        # 90 % missed burns 18x the 5 % budget (> 14.4); 10 % burns 2x. Judged once 20 requests are in the window
        # (minute 2 at 10 a minute).
        Case(f"Tenant{label}BudgetBurnFast", _slo(objective, 9), _slo(objective, 1), [labels], holds=(2, 3)),
        # 20 % burns 4x (> 3 over a day and 2 hours, short of 6 and 14.4); 4 % is within the budget.
        Case(f"Tenant{label}BudgetBurnSlow", _slo(objective, 2), _slo(objective, 0.4), [labels], holds=(2, 3)),
    ]


def _budget_share(remaining: float) -> dict[str, str]:
    return {'litellm_team_max_budget_metric{team_alias="acme", team="t1"}': gauge(5),
            'litellm_remaining_team_budget_metric{team_alias="acme", team="t1"}': gauge(remaining)}


def _projection(per_minute: float) -> dict[str, str]:
    return {'litellm_spend_metric_total{team_alias="globex", model="tiny"}': counter(per_minute),
            'litellm_team_budget_remaining_hours_metric{team_alias="globex", team="t2"}': gauge(10),
            'litellm_remaining_team_budget_metric{team_alias="globex", team="t2"}': gauge(2)}


def _pool(ready: int) -> dict[str, str]:
    node = 'node="gpu-0"'
    return {f'kube_node_labels{{{node}, label_node_restriction_kubernetes_io_tenantry_pool="h100"}}': gauge(1),
            f'kube_node_status_allocatable{{{node}, resource="nvidia_com_gpu", unit="integer"}}': gauge(8),
            f'kube_node_status_condition{{{node}, condition="Ready", status="true"}}': gauge(ready)}


CASES = [
    *_burn_cases("ttft", "Ttft"),
    *_burn_cases("itl", "Itl"),
    # acme allows 1 % server errors: 15 % burns it past 14.4 times; 5 % is short of the 6 times of the 6-hour pair
    # (the old rule paged at 1 %); globex's 15 % burns its own 5 % 3 times.
    Case("TenantErrorRateHigh", _requests({"200": 85, "500": 15}), _requests({"200": 95, "500": 5}),
         [ACME_ALERT], shared=_requests({"200": 85, "500": 15}, team="globex"), holds=(1, 2)),
    # A guaranteed tenant may see 1 % of 429s of each cause; best-effort globex's 50 % never alerts. Shed by
    # admission for capacity, they page; refused for its own limits (no shed), a ticket. 1.8 % of 429s, half of
    # each cause, is neither (the old rule paged on it).
    Case("TenantGuaranteedThrottled", {**_requests({"200": 98, "429": 2}), **_shed(2)},
         {**_requests({"200": 98.2, "429": 1.8}), **_shed(0.9)}, [{**ACME_ALERT, "cause": "the platform's capacity"}],
         shared={**_requests({"200": 50, "429": 50}, team="globex"), **_shed(50, "globex", "best-effort")}),
    Case("TenantGuaranteedThrottled", _requests({"200": 98, "429": 2}),
         {**_requests({"200": 98.2, "429": 1.8}), **_shed(0.9)},
         [{**ACME_ALERT, "severity": "warning", "cause": "its own limits"}],
         shared=_requests({"200": 50, "429": 50}, team="globex")),
    # 96 % of acme's 5 USD spent passes 50, 80 and 95 %; 40 % passes none.
    Case("TenantBudgetSpent", _budget_share(0.2), _budget_share(3),
         [{**ACME_ALERT, "severity": s, "threshold": t} for s, t in (("info", "0.5"), ("warning", "0.8"),
                                                                      ("critical", "0.95"))]),
    # 6 USD an hour for the 10 hours left needs 60 USD of the 2 left; 0.18 an hour needs 1.8.
    # From t minutes of data the 1h rate reads 0.1 t USD an hour (t > 2 projects more than 2 USD in 10 h).
    Case("TenantBudgetExhaustionProjected", _projection(0.1), _projection(0.003),
         [{"tenant": "globex", "tier": "best-effort"}], holds=(2, 4)),
    Case("EngineDown", {'up{job="tiny"}': gauge(0)}, {'up{job="tiny"}': gauge(1)}, [TINY],
         shared={'up{job="micro"}': gauge(1)}),
    # Two requests running and the token counter flat fires; the same two generating 50 tokens a minute does not.
    Case("EngineStuck", {'vllm:num_requests_running{job="tiny"}': gauge(2), 'vllm:generation_tokens_total{job="tiny"}':
                         gauge(900)},
         {'vllm:num_requests_running{job="tiny"}': gauge(2), 'vllm:generation_tokens_total{job="tiny"}': counter(50)},
         [TINY]),
    # The local plan sheds best-effort at 4 waiting and at 92 % KV-cache usage.
    # One of tiny's two replicas available fires; both do not (none is EngineDown's).
    Case("EngineReplicasMissing", {'kube_deployment_status_replicas_available{deployment="tiny"}': gauge(1)},
         {'kube_deployment_status_replicas_available{deployment="tiny"}': gauge(2)},
         [{"engine": "tiny", "pool": "local", "deployment": "tiny"}],
         shared={'kube_deployment_spec_replicas{deployment="tiny"}': gauge(2)}),
    # 10 calls a minute to tiny and its adapter: 1 a minute ending in a 500 on the adapter is 10 % (over 5 %);
    # 0.4 is 4 %, with the tenants' own 429s beside it, which are no engine's error.
    Case("EngineErrorsHigh",
         {'litellm_deployment_failure_responses_total{model_group="acme-support", exception_status="500"}': counter(1)},
         {'litellm_deployment_failure_responses_total{model_group="acme-support", exception_status="500"}': counter(0.4),
          'litellm_deployment_failure_responses_total{model_group="tiny", exception_status="429"}': counter(5)},
         [{"engine": "tiny", "pool": "local"}], holds=(1, 3),
         shared={'litellm_deployment_total_requests_total{model_group="tiny"}': counter(5),
                 'litellm_deployment_total_requests_total{model_group="acme-support"}': counter(5)}),
    # vLLM's LoRA info: one series per state it reported, valued at the time it did (promtool's time() is the
    # minute x 60). The newest holding a waiting adapter fires; a waiting state left behind by a newer one does not.
    Case("EngineLoraSlotsStarved",
         {_lora("acme-support", "globex-legal"): "0+60x60", _lora("", ""): "0x60"},
         {_lora("acme-support", "globex-legal"): "0x60", _lora("", "acme-support"): "0+60x60"}, [TINY]),
    # llama-70b (h200-many-adapters) is kv-aware: none available fires, one does not, nor another namespace's none.
    *(Case(alert, _available(name, 0), _available(name, 1), [{**LLAMA_70B, "deployment": name}],
           stack="h200-many-adapters", shared=_available(name, 0, "other"))
      for alert, name in (("InferenceGatewayDown", "llama-70b-inference-istio"),
                          ("EndpointPickerDown", "llama-70b-pool-epp"))),
    Case("EngineQueueBacklog", {'vllm:num_requests_waiting{job="tiny"}': gauge(5)},
         {'vllm:num_requests_waiting{job="tiny"}': gauge(4)}, [TINY]),
    Case("EngineKvCacheFull", {'vllm:kv_cache_usage_perc{job="tiny"}': gauge(0.95)},
         {'vllm:kv_cache_usage_perc{job="tiny"}': gauge(0.9)}, [TINY]),
    Case("EnginePreemptionsRising", {'vllm:num_preemptions_total{job="tiny"}': counter(1)},
         {'vllm:num_preemptions_total{job="tiny"}': gauge(3)}, [TINY]),
    # tiny serves acme, whose 2 s is the tightest TTFT objective: p95 within (2.5, 5] is over, within (1, 2] is not.
    Case("EngineTtftHigh",
         _histogram("vllm:time_to_first_token_seconds", 'job="tiny"', {"1": 0, "2": 0, "2.5": 0, "5": 10, "+Inf": 10}),
         _histogram("vllm:time_to_first_token_seconds", 'job="tiny"', {"1": 0, "2": 10, "2.5": 10, "5": 10, "+Inf": 10}),
         [TINY]),
    Case("GatewayReplicaDown", {'up{job="tenantry-gateway", instance="a"}': gauge(0)},
         {'up{job="tenantry-gateway", instance="a"}': gauge(1)}, [{"severity": "critical"}]),
    # h100x8-shared-70b plans two replicas: one answering is fewer than planned.
    Case("GatewayReplicaDown", {'up{job="tenantry-gateway", instance="b"}': gauge(0)},
         {'up{job="tenantry-gateway", instance="b"}': gauge(1)}, [{"severity": "warning"}],
         stack="h100x8-shared-70b", shared={'up{job="tenantry-gateway", instance="a"}': gauge(1)}),
    Case("GatewayOverheadHigh",
         _histogram("tenantry_gateway_policy_seconds", 'job="g"', {"0.01": 90, "0.025": 98, "0.05": 100, "+Inf": 100}),
         _histogram("tenantry_gateway_policy_seconds", 'job="g"', {"0.01": 90, "0.025": 100, "0.05": 100, "+Inf": 100}),
         [{}]),
    Case("GatewayPolicyFailSafe", {'tenantry_gateway_failsafe_total{engine="tiny", tier="spot", cause="redis"}': counter(1)},
         {'tenantry_gateway_failsafe_total{engine="tiny", tier="spot", cause="redis"}': gauge(4)},
         [{"engine": "tiny", "cause": "redis"}]),
    Case("PostgresDown", _service("litellm_postgres", 6, 10), _service("litellm_postgres", 5, 10), [{}]),
    # PostgreSQL stopped: every call fails, and LiteLLM counts no other (a share of 1); one failed query is no
    # outage (a 5-minute share paged for it)
    Case("PostgresDown", _service("litellm_postgres", 2, 2), _one_failed_call("litellm_postgres"), [{}]),
    Case("PostgresDown", {'cnpg_collector_up{cluster="tenantry-postgres"}': gauge(0)},
         {'cnpg_collector_up{cluster="tenantry-postgres"}': gauge(1)}, [{"cluster": "tenantry-postgres"}],
         stack="h100x8-shared-70b"),
    # A spend write failing every minute (the labelled series appears at its first failure, at 1) against one
    # failing every 4 minutes, which never holds 5 minutes; other calls failing are PostgresDown's.
    # The instances' exporter itself: crashed (up 0), or no instance left to scrape (no `up` at all, where
    # cnpg_collector_up is gone too), on a cluster (kube-state-metrics reports nodes).
    Case("PostgresDown", {**_postgres_scrape(0), **KSM}, {**_postgres_scrape(1), **KSM}, [{}], stack="h100x8-shared-70b"),
    Case("PostgresDown", KSM, {**_postgres_scrape(1), **KSM}, [{}], stack="h100x8-shared-70b"),
    Case("PostgresSpendWritesFailing", _db_failures("update_spend", every=1), _db_failures("update_spend", every=4),
         [{}], shared=_db_failures("get_data", every=1), holds=(3, 4)),
    # The latest base backup failed after the last good one; a failure older than the last good one is over.
    Case("PostgresBackupFailed", _backups(failed=200, available=100), _backups(failed=100, available=200),
         [{"namespace": "tenantry"}], stack="h100x8-shared-70b"),
    # The newest backup 25 h before the series start (the daily schedule's 24 h gap and an hour) against one
    # 24 h 5 min before it, still within the bound 55 minutes later.
    Case("PostgresBackupTooOld", {**_backups(available=-90_000), **KSM}, {**_backups(available=-86_000), **KSM},
         [{}], stack="h100x8-shared-70b", holds=(1, 1)),
    Case("PostgresWalArchivingFailing", _wal_ready(11), _wal_ready(10),
         [{"namespace": "tenantry", "pod": "tenantry-postgres-1"}], stack="h100x8-shared-70b"),
    # time() = minute x 60: renewal due 2 h before the start fires, 1 h before does not (2 h grace, an hour of data);
    # expiring a minute under a day after it fires, a day and an hour does not; the unissued client cert (0) neither.
    *(Case(alert, _certificate(time, broken), _certificate(time, healthy), [CERTIFICATE], stack="h100x8-shared-70b",
           shared=_certificate(time, 0, "barman-cloud-client"))
      for alert, time, broken, healthy in (("CertificateRenewalOverdue", "renewal", -7200, -3600),
                                           ("CertificateExpiring", "expiration", 86_340, 90_000))),
    # 361 of 400 MiB used fires, 360 does not; 1 key evicted a minute fires, none does not.
    Case("RedisMemoryNearLimit", _redis(361), _redis(360), [TENANTRY_NS], stack="h100x8-shared-70b"),
    Case("RedisEvictingKeys", {f"redis_evicted_keys_total{{{REDIS}}}": counter(1)},
         {f"redis_evicted_keys_total{{{REDIS}}}": gauge(7)}, [TENANTRY_NS], stack="h100x8-shared-70b", holds=(1, 2)),
    # The standby 61 s behind fires, 60 s does not; the primary (0 s) is never the one named.
    Case("PostgresReplicaLagging", {_pg("cnpg_pg_replication_lag", 2): gauge(61)},
         {_pg("cnpg_pg_replication_lag", 2): gauge(60)}, [{"pod": "tenantry-postgres-2"}], stack="h100x8-shared-70b",
         shared={_pg("cnpg_pg_replication_lag", 1): gauge(0)}),
    # Two instances planned: the primary streaming to none fires, to its one standby does not.
    Case("PostgresReplicasMissing", {_pg("cnpg_pg_replication_streaming_replicas", 1): gauge(0)},
         {_pg("cnpg_pg_replication_streaming_replicas", 1): gauge(1)}, [{}], stack="h100x8-shared-70b",
         shared={_pg("cnpg_pg_replication_streaming_replicas", 2): gauge(0)}),
    # 81 of 100 connections in use (61 idle, 20 active) fires; 80 does not.
    Case("PostgresConnectionsNearLimit", {_pg("cnpg_backends_total", 1, 'state="idle"'): gauge(61)},
         {_pg("cnpg_backends_total", 1, 'state="idle"'): gauge(60)}, [{"pod": "tenantry-postgres-1"}],
         stack="h100x8-shared-70b",
         shared={_pg("cnpg_backends_total", 1, 'state="active"'): gauge(20),
                 _pg("cnpg_pg_settings_setting", 1, 'name="max_connections"'): gauge(100)}),
    Case("RedisDown", _service("litellm_redis", 6, 10), _service("litellm_redis", 5, 10), [{}]),
    Case("RedisDown", _service("litellm_redis", 2, 3), _one_failed_call("litellm_redis"), [{}]),
    # The one-shot Job with its retries spent fires; one whose failed pod a retry saved (kube_job_status_failed 1,
    # the Failed condition false) does not, nor another namespace's Job.
    Case("ReconcilerJobFailed", _one_shot_job(failed=True), _one_shot_job(failed=False),
         [{"namespace": "tenantry", "job_name": "tenantry-reconcile-0123abcdef"}], stack="h100x8-shared-70b",
         shared={**_reconciler_cronjob(every=15), 'kube_job_failed{namespace="other", job_name="backup-29", '
                 'condition="true"}': gauge(1)}),
    # The CronJob without a success since minute 0 fires once 45 minutes have passed; one succeeding every
    # 15 minutes (its failed Jobs in between kept in the history) does not.
    Case("ReconcilerJobFailed", _reconciler_cronjob(every=None), _reconciler_cronjob(every=15),
         [{"namespace": "tenantry", "cronjob": "tenantry-reconcile", "job_name": "tenantry-reconcile"}],
         stack="h100x8-shared-70b", holds=(46, 46)),
    # A new XID 79 (fallen off the bus) pages; the same code held since before (the gauge is sticky) and a new
    # application XID 13 do not.
    Case("GpuXidError", {f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}}": _xid(0, 79)},
         {f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}}": gauge(79), f"DCGM_FI_DEV_XID_ERRORS{{{GPU_1}}}": _xid(0, 13)},
         [GPU_ALERT], stack="h100x8-shared-70b", holds=(3, 3)),
    Case("GpuEccErrors", {f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{GPU}}}": counter(1)},
         {f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{GPU}}}": gauge(3)}, [GPU_ALERT], stack="h100x8-shared-70b"),
    Case("GpuTemperatureHigh", {f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}": gauge(86)}, {f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}": gauge(85)},
         [GPU_ALERT], stack="h100x8-shared-70b"),
    # Nanoseconds held back per minute: 15 s is a quarter of the time, 11 s under a fifth; the 10m rate
    # passes a fifth once 9 minutes of data are in. Thermal pages beside a GPU that also reports power time.
    Case("GpuThrottled", {f"DCGM_FI_DEV_POWER_VIOLATION{{{GPU}}}": counter(15e9)},
         {f"DCGM_FI_DEV_POWER_VIOLATION{{{GPU}}}": counter(11e9)}, [{**GPU_ALERT, "reason": "power"}],
         stack="h100x8-shared-70b", holds=(8, 10)),
    Case("GpuThrottled", {f"DCGM_FI_DEV_THERMAL_VIOLATION{{{GPU}}}": counter(15e9)},
         {f"DCGM_FI_DEV_THERMAL_VIOLATION{{{GPU}}}": counter(11e9)}, [{**GPU_ALERT, "reason": "thermal"}],
         stack="h100x8-shared-70b", holds=(8, 10), shared={f"DCGM_FI_DEV_POWER_VIOLATION{{{GPU}}}": counter(1e9)}),
    Case("MigConfigFailed", {'kube_node_labels{node="gpu-0", label_nvidia_com_mig_config_state="failed"}': gauge(1)},
         {'kube_node_labels{node="gpu-0", label_nvidia_com_mig_config_state="success"}': gauge(1)},
         [{"node": "gpu-0"}], stack="h100-mig-mixed"),
    Case("NodePoolGpusMissing", _pool(0), _pool(1),
         [{"pool": "h100", "resource": "nvidia.com/gpu", "needed": "8"}], stack="h100x8-shared-70b"),
]


def _minutes(duration: str) -> int:
    assert duration.endswith("m"), duration
    return int(duration[:-1])


def _series(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"series": name, "values": v} for name, v in values.items()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.alert}-{c.stack}-{'-'.join(sorted(c.fired[0].values()))}")
def test_an_alert_is_quiet_below_its_threshold_and_fires_only_after_its_for(case, tmp_path):
    candidates = [r for r in _rules(case.stack) if r.get("alert") == case.alert]
    severities = {labels.get("severity") for labels in case.fired} - {None}
    rule = next(r for r in candidates if not severities or r["labels"]["severity"] in severities)
    wait = _minutes(rule["for"])
    # What the annotations still template from $labels must be labels of the expression's result
    # (Prometheus's $labels does not hold those the rule adds: rules.py writes those in).
    templated = set(re.findall(r"\$labels\.(\w+)", rule["annotations"]["summary"] + rule["annotations"]["description"]))
    assert all(templated <= set(labels) - set(rule["labels"]) for labels in case.fired), (templated, case.fired)
    firing = [{"exp_labels": {"severity": rule["labels"]["severity"], **labels}} for labels in case.fired]
    first, last = case.holds
    checks = [{"eval_time": f"{last + wait + 2}m", "alertname": case.alert, "exp_alerts": firing}]
    if wait:
        checks.insert(0, {"eval_time": f"{first + wait - 1}m", "alertname": case.alert, "exp_alerts": []})
    _unit_test(tmp_path, case.stack, [
        {"interval": "1m", "input_series": _series({**case.shared, **case.broken}), "alert_rule_test": checks},
        {"interval": "1m", "input_series": _series({**case.shared, **case.healthy}), "alert_rule_test": [
            {"eval_time": f"{last + wait + 2}m", "alertname": case.alert, "exp_alerts": []},
            {"eval_time": f"{MINUTES - 5}m", "alertname": case.alert, "exp_alerts": []}]},
    ])


def test_every_alert_has_a_case():
    assert {c.alert for c in CASES} == {a.name for a in rules.ALERTS}


def test_a_held_xid_stops_paging_and_a_new_one_pages_again(tmp_path):
    """The gauge keeps XID 79 after it happened: the page resolves once the change is out of the window, and a
    later fatal XID (48, a double-bit ECC error) on the same GPU pages again."""
    series = {f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}}": f"0x2 79x20 48x{MINUTES - 23}"}
    firing = [{"exp_labels": {"severity": "critical", **GPU_ALERT}}]
    _unit_test(tmp_path, "h100x8-shared-70b", [{"interval": "1m", "input_series": _series(series), "alert_rule_test": [
        {"eval_time": "5m", "alertname": "GpuXidError", "exp_alerts": firing},
        {"eval_time": "20m", "alertname": "GpuXidError", "exp_alerts": []},
        {"eval_time": "26m", "alertname": "GpuXidError", "exp_alerts": firing}]}])


def test_a_cluster_that_never_backed_up_pages_once_its_schedule_has_been_missed(tmp_path):
    """No backup series at all (the plugin never completed one), on a cluster: the daily schedule's 25 hours
    count from 0. Five-minute samples, within Prometheus's five-minute lookback."""
    firing = [{"exp_labels": {"severity": "critical"}}]
    _unit_test(tmp_path, "h100x8-shared-70b", [{"interval": "5m", "input_series": _series({
        'kube_node_labels{node="gpu-0", label_node_restriction_kubernetes_io_tenantry_pool="h100"}': "1x330"}), "alert_rule_test": [
        {"eval_time": "24h55m", "alertname": "PostgresBackupTooOld", "exp_alerts": []},
        {"eval_time": "25h20m", "alertname": "PostgresBackupTooOld", "exp_alerts": firing}]}], evaluation_interval="5m")
