"""Every metric tenantry's rules and dashboards may read, and who exports it.

A rule or a panel that names a metric nobody exports is silent forever, and
reads as "all is well". So every name an expression uses must be here, and
each source's names are checked against what that source really exports at
its pinned version (tests/unit/test_metrics_catalog.py reads the installed
vLLM, LiteLLM and plugin sources and the DCGM exporter's list in the GPU
Operator's values; tests/local/test_metrics_live.py reads the local stack's
live /metrics for every source the local stack runs).

Each family's labels, and how a label a rule uses is proven to be there, are in
metric_labels.py and label_flow.py.

Names are families as the exposition shows them: a counter with its `_total`,
a histogram by its base name (its `_bucket`, `_sum` and `_count` are accepted).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import promql_parser
import yaml

GPU_OPERATOR_VALUES = Path(__file__).resolve().parent.parent.parent / "charts" / "gpu-operator" / "values.yaml"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Source:
    name: str
    checked_against: str
    """Where its names were read, at the pinned version."""
    local: bool
    """Whether the local stack runs it, so its metrics have data there."""


VLLM = Source("vllm", "vLLM 0.32.0 (vllm/v1/metrics/loggers.py), and the local engines' /metrics", local=True)
LITELLM = Source("litellm", "LiteLLM 1.108.7 (litellm/integrations/prometheus.py, prometheus_services.py), "
                 "and the local gateway's /metrics/", local=True)
TENANTRY = Source("tenantry", "tenantry's tenant-policy plugin (tenantry/gateway/tenant_policy*.py)", local=True)
PROMETHEUS = Source("prometheus", "Prometheus's own scrape series", local=True)
DCGM = Source("dcgm", "the DCGM exporter's metrics list in charts/gpu-operator/values.yaml (dcgm-exporter 4.5.3-4.8.2)",
              local=False)
KUBE_STATE = Source("kube-state-metrics", "kube-state-metrics v2 (internal/store of v2.20.0)", local=False)
CLOUDNATIVE_PG = Source("cloudnative-pg", "CloudNativePG 1.30's instance exporter (pkg/management/postgres/webserver/"
                        "metricserver) and its default queries (config/manager/default-monitoring.yaml: pg_replication, "
                        "backends, pg_settings; a query's column is cnpg_<query>_<column>)", local=False)
BARMAN_CLOUD = Source("barman-cloud", "the Barman Cloud plugin v0.13.0 (web/docs/observability.md), through the "
                      "instances' exporter", local=False)
REDIS_EXPORTER = Source("redis-exporter", "oliver006/redis_exporter v1.88.0 (exporter/exporter.go: Redis's INFO fields "
                        "under the redis_ namespace), beside Redis on Kubernetes", local=False)
CERT_MANAGER = Source("cert-manager", "cert-manager v1.21.1's controller (pkg/metrics/certificates.go; its exposition "
                      "in test/integration/certificates/metrics_controller_test.go: each Certificate's name, namespace "
                      "and issuer, 0 until issued), through the chart's ServiceMonitor", local=False)

_COUNTER, _GAUGE, _HISTOGRAM = "counter", "gauge", "histogram"

_BY_SOURCE: dict[Source, dict[str, str]] = {
    VLLM: {
        "vllm:num_requests_running": _GAUGE,
        "vllm:num_requests_waiting": _GAUGE,
        "vllm:kv_cache_usage_perc": _GAUGE,
        "vllm:num_preemptions_total": _COUNTER,
        "vllm:prompt_tokens_total": _COUNTER,
        "vllm:generation_tokens_total": _COUNTER,
        "vllm:request_success_total": _COUNTER,
        "vllm:prefix_cache_queries_total": _COUNTER,
        "vllm:prefix_cache_hits_total": _COUNTER,
        "vllm:lora_requests_info": _GAUGE,
        "vllm:time_to_first_token_seconds": _HISTOGRAM,
        "vllm:inter_token_latency_seconds": _HISTOGRAM,
        "vllm:e2e_request_latency_seconds": _HISTOGRAM,
        "vllm:request_queue_time_seconds": _HISTOGRAM,
    },
    LITELLM: {
        "litellm_proxy_total_requests_metric_total": _COUNTER,
        "litellm_proxy_failed_requests_metric_total": _COUNTER,
        "litellm_spend_metric_total": _COUNTER,
        "litellm_input_tokens_metric_total": _COUNTER,
        "litellm_output_tokens_metric_total": _COUNTER,
        "litellm_total_tokens_metric_total": _COUNTER,
        "litellm_remaining_team_budget_metric": _GAUGE,
        "litellm_team_max_budget_metric": _GAUGE,
        "litellm_team_budget_remaining_hours_metric": _GAUGE,
        "litellm_deployment_state": _GAUGE,
        "litellm_deployment_success_responses_total": _COUNTER,
        "litellm_deployment_failure_responses_total": _COUNTER,
        "litellm_deployment_total_requests_total": _COUNTER,
        "litellm_deployment_successful_fallbacks_total": _COUNTER,
        "litellm_deployment_failed_fallbacks_total": _COUNTER,
        "litellm_request_total_latency_metric": _HISTOGRAM,
        "litellm_llm_api_time_to_first_token_metric": _HISTOGRAM,
        "litellm_in_flight_requests": _GAUGE,
        # service_callback prometheus_system: LiteLLM's own calls to PostgreSQL and Redis
        "litellm_postgres_total_requests_total": _COUNTER,
        "litellm_postgres_failed_requests_total": _COUNTER,
        "litellm_postgres_latency": _HISTOGRAM,
        "litellm_redis_total_requests_total": _COUNTER,
        "litellm_redis_failed_requests_total": _COUNTER,
        "litellm_redis_latency": _HISTOGRAM,
        "litellm_redis_circuit_breaker_state": _GAUGE,
    },
    TENANTRY: {
        "tenantry_gateway_admissions_total": _COUNTER,
        "tenantry_gateway_refused_total": _COUNTER,
        "tenantry_gateway_overrides_total": _COUNTER,
        "tenantry_gateway_failsafe_total": _COUNTER,
        "tenantry_gateway_shed_total": _COUNTER,
        "tenantry_gateway_policy_seconds": _HISTOGRAM,
        "tenantry_tenant_requests_total": _COUNTER,
        "tenantry_tenant_slo_misses_total": _COUNTER,
        "tenantry_tenant_prompt_tokens_total": _COUNTER,
        "tenantry_tenant_cached_prompt_tokens_total": _COUNTER,
        "tenantry_tenant_ttft_seconds": _HISTOGRAM,
        "tenantry_tenant_itl_seconds": _HISTOGRAM,
    },
    PROMETHEUS: {"up": _GAUGE},
    KUBE_STATE: {
        "kube_deployment_status_replicas_available": _GAUGE,
        "kube_deployment_spec_replicas": _GAUGE,
        "kube_job_status_failed": _GAUGE,
        "kube_job_owner": _GAUGE,
        "kube_job_failed": _GAUGE,
        "kube_cronjob_status_last_successful_time": _GAUGE,
        "kube_cronjob_created": _GAUGE,
        "kube_node_labels": _GAUGE,
        "kube_node_status_allocatable": _GAUGE,
        "kube_node_status_condition": _GAUGE,
        "kube_node_spec_unschedulable": _GAUGE,
        "kube_pod_container_status_restarts_total": _COUNTER,
        "kube_pod_status_ready": _GAUGE,
    },
    CLOUDNATIVE_PG: {
        "cnpg_collector_up": _GAUGE,
        "cnpg_collector_pg_wal_archive_status": _GAUGE,
        "cnpg_pg_replication_lag": _GAUGE,
        "cnpg_pg_replication_streaming_replicas": _GAUGE,
        "cnpg_backends_total": _GAUGE,
        "cnpg_pg_settings_setting": _GAUGE,
    },
    REDIS_EXPORTER: {
        "redis_memory_used_bytes": _GAUGE,
        "redis_memory_max_bytes": _GAUGE,
        "redis_evicted_keys_total": _COUNTER,
    },
    CERT_MANAGER: {
        "certmanager_certificate_expiration_timestamp_seconds": _GAUGE,
        "certmanager_certificate_renewal_timestamp_seconds": _GAUGE,
    },
    BARMAN_CLOUD: {
        "barman_cloud_cloudnative_pg_io_last_failed_backup_timestamp": _GAUGE,
        "barman_cloud_cloudnative_pg_io_last_available_backup_timestamp": _GAUGE,
        "barman_cloud_cloudnative_pg_io_first_recoverability_point": _GAUGE,
    },
}


@cache
def dcgm_fields() -> dict[str, str]:
    """The DCGM fields the exporter collects, with their type, as rendered into the GPU Operator's values."""
    values = yaml.safe_load(GPU_OPERATOR_VALUES.read_text(encoding="utf-8"))
    rows = (line.split(",") for line in values["dcgmExporter"]["config"]["data"].splitlines())
    return {row[0].strip(): row[1].strip() for row in rows if row and row[0].strip() and not row[0].startswith("#")}


@cache
def exported() -> dict[str, tuple[Source, str]]:
    """Every family: its source and type."""
    catalog = {name: (source, kind) for source, names in _BY_SOURCE.items() for name, kind in names.items()}
    catalog.update({name: (DCGM, kind) for name, kind in dcgm_fields().items() if kind != "label"})
    return catalog


def names_of(source: Source) -> dict[str, str]:
    return {name: kind for name, (s, kind) in exported().items() if s == source}


def family(series_name: str) -> str | None:
    """The catalog family a series name belongs to (a histogram's `_bucket` to its base), or None."""
    catalog = exported()
    if series_name in catalog:
        return series_name
    for suffix in HISTOGRAM_SUFFIXES:
        base = series_name.removesuffix(suffix)
        if base != series_name and catalog.get(base, (None, ""))[1] == _HISTOGRAM:
            return base
    return None


class UnknownMetric(ValueError):
    pass


def metric_names(expr: str) -> set[str]:
    """Every series name an expression selects (recording rules' names included). A selector
    without a name ({__name__=~...}) is refused: its metrics cannot be checked."""
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if not node.name:
                raise UnknownMetric(f"{expr!r}: a selector without a metric name ({node.matchers})")
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return names


def unknown_metrics(expr: str, recorded: set[str] = frozenset()) -> set[str]:
    """The names an expression uses that are neither exported by a source nor recorded by a rule."""
    return {name for name in metric_names(expr) if name not in recorded and family(name) is None}


def kubernetes_only(expr: str) -> set[str]:
    """The families an expression reads that only exist on Kubernetes (no data on the local stack)."""
    return {f for f in map(family, metric_names(expr)) if f is not None and not exported()[f][0].local}
