"""The labels each family of the metric catalog carries in Prometheus, so a rule that
matches, groups or joins on a label its series lack is caught before it is silent.

A series' labels in Prometheus are its exporter's own plus what its scrape adds
(job, instance, and on Kubernetes the Prometheus Operator's namespace, service,
pod, container and endpoint). Where the two collide and the scrape does not honour
the exporter's labels, the exporter's is kept as `exported_<name>`: cert-manager's
`namespace` becomes `exported_namespace`, vLLM's `engine` (its engine index)
becomes `exported_engine` on the local stack, whose engine jobs carry the engine's
name as `engine`. A rule must hold on both the cluster and the local stack, so a
source that runs in both offers only the labels that mean the same in each.

Where the names were read, at the pinned versions: each Source's `checked_against`
(tenantry/monitoring/metrics.py). The exporters the local stack runs are checked
again against the installed sources (tests/unit/test_metric_labels.py) and against
a live scrape (tests/local/test_metrics_live.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from tenantry.configs.node_registration import MIG_CONFIG_LABEL, POOL_LABEL
from tenantry.monitoring import metrics
from tenantry.monitoring.metrics import Source

_VLLM = ("model_name", "engine")
_TENANT = ("tenant", "tier", "engine")
_LITELLM_KEY = ("hashed_api_key", "api_key_alias", "team", "team_alias")
_LITELLM_TOKENS = ("end_user", *_LITELLM_KEY, "model", "user", "user_email", "requested_model", "model_id",
                   "api_provider", "org_id", "org_alias")
_LITELLM_DEPLOYMENT = ("model_group", "requested_model", "litellm_model_name", "model_id", "api_base", "api_provider",
                       *_LITELLM_KEY, "client_ip", "user_agent")
_LITELLM_FALLBACK = ("requested_model", "fallback_model", *_LITELLM_KEY, "exception_status", "exception_class",
                     "model_id")
_LITELLM_PROXY = ("end_user", *_LITELLM_KEY, "requested_model", "user", "user_email", "route", "client_ip",
                  "user_agent", "model_id", "api_provider", "org_id", "org_alias")
_LITELLM_LATENCY = ("model_group", "end_user", *_LITELLM_KEY, "requested_model", "user", "model", "model_id",
                    "api_provider", "service_tier", "org_id", "org_alias")


def node_label(kubernetes_label: str) -> str:
    """kube-state-metrics' name for an allowlisted node label: `label_` and the name with every other
    character than a letter, digit or underscore as `_`."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", kubernetes_label)


NODE_LABELS_FOR_RULES = (POOL_LABEL, MIG_CONFIG_LABEL, f"{MIG_CONFIG_LABEL}.state")
"""Node labels kube-state-metrics adds to kube_node_labels (tenantry/deploy/observability.py allows them): the pool
a node serves, the MIG layout it was told to take, and the MIG manager's verdict on applying it."""

OWN_LABELS: dict[str, tuple[str, ...]] = {
    # vLLM 0.32, vllm/v1/metrics/loggers.py: labelnames = ["model_name", "engine"], and each family's additions
    **{name: _VLLM for name in metrics.names_of(metrics.VLLM)},
    "vllm:request_success_total": (*_VLLM, "finished_reason"),
    "vllm:lora_requests_info": ("max_lora", "waiting_lora_adapters", "running_lora_adapters"),
    # LiteLLM 1.108.7, litellm/types/integrations/prometheus.py (PrometheusMetricLabels) and prometheus_services.py
    "litellm_proxy_total_requests_metric_total": (*_LITELLM_PROXY, "status_code"),
    "litellm_proxy_failed_requests_metric_total": (*_LITELLM_PROXY, "exception_status", "exception_class"),
    "litellm_spend_metric_total": (*_LITELLM_TOKENS, "client_ip", "user_agent", "service_tier"),
    "litellm_input_tokens_metric_total": _LITELLM_TOKENS,
    "litellm_output_tokens_metric_total": _LITELLM_TOKENS,
    "litellm_total_tokens_metric_total": _LITELLM_TOKENS,
    "litellm_remaining_team_budget_metric": ("team", "team_alias"),
    "litellm_team_max_budget_metric": ("team", "team_alias"),
    "litellm_team_budget_remaining_hours_metric": ("team", "team_alias"),
    "litellm_deployment_state": ("litellm_model_name", "model_id", "api_base", "api_provider"),
    "litellm_deployment_success_responses_total": _LITELLM_DEPLOYMENT,
    "litellm_deployment_failure_responses_total": (*_LITELLM_DEPLOYMENT, "exception_status", "exception_class"),
    "litellm_deployment_total_requests_total": _LITELLM_DEPLOYMENT,
    "litellm_deployment_successful_fallbacks_total": _LITELLM_FALLBACK,
    "litellm_deployment_failed_fallbacks_total": _LITELLM_FALLBACK,
    "litellm_request_total_latency_metric": _LITELLM_LATENCY,
    "litellm_llm_api_time_to_first_token_metric": tuple(dict.fromkeys(("model_group", "model", *_LITELLM_LATENCY))),
    "litellm_in_flight_requests": (),
    # a service's metrics carry a label named after the service, its failures the error's class and the call
    "litellm_postgres_total_requests_total": ("postgres",),
    "litellm_postgres_failed_requests_total": ("postgres", "error_class", "function_name"),
    "litellm_postgres_latency": ("postgres",),
    "litellm_redis_total_requests_total": ("redis",),
    "litellm_redis_failed_requests_total": ("redis", "error_class", "function_name"),
    "litellm_redis_latency": ("redis",),
    "litellm_redis_circuit_breaker_state": ("state",),
    # tenantry's plugin, tenantry/gateway/tenant_policy_metrics.py and tenant_policy_outcomes.py
    "tenantry_gateway_admissions_total": (*_TENANT, "decision", "reason"),
    "tenantry_gateway_refused_total": ("tenant", "tier", "reason"),
    "tenantry_gateway_overrides_total": ("tenant", "field"),
    "tenantry_gateway_failsafe_total": ("engine", "tier", "cause"),
    "tenantry_gateway_shed_total": ("tenant", "tier", "reason"),
    "tenantry_gateway_policy_seconds": (),
    "tenantry_tenant_requests_total": _TENANT,
    "tenantry_tenant_slo_misses_total": (*_TENANT, "objective"),
    "tenantry_tenant_prompt_tokens_total": _TENANT,
    "tenantry_tenant_cached_prompt_tokens_total": _TENANT,
    "tenantry_tenant_ttft_seconds": _TENANT,
    "tenantry_tenant_itl_seconds": _TENANT,
    "up": (),
    # kube-state-metrics v2.20.0, internal/store/{deployment,job,cronjob,node,pod}.go
    "kube_deployment_status_replicas_available": ("namespace", "deployment"),
    "kube_deployment_spec_replicas": ("namespace", "deployment"),
    "kube_job_status_failed": ("namespace", "job_name", "reason"),
    "kube_job_owner": ("namespace", "job_name", "owner_kind", "owner_name", "owner_is_controller"),
    "kube_job_failed": ("namespace", "job_name", "condition"),
    "kube_cronjob_status_last_successful_time": ("namespace", "cronjob"),
    "kube_cronjob_created": ("namespace", "cronjob"),
    "kube_node_labels": ("node", *map(node_label, NODE_LABELS_FOR_RULES)),
    "kube_node_status_allocatable": ("node", "resource", "unit"),
    "kube_node_status_condition": ("node", "condition", "status"),
    "kube_node_spec_unschedulable": ("node",),
    "kube_pod_container_status_restarts_total": ("namespace", "pod", "uid", "container"),
    "kube_pod_status_ready": ("namespace", "pod", "uid", "condition"),
    # CloudNativePG 1.30: the collector's own gauges (pg_collector.go) and its default queries' LABEL columns
    "cnpg_collector_up": ("cluster",),
    "cnpg_collector_pg_wal_archive_status": ("value",),
    "cnpg_pg_replication_lag": (),
    "cnpg_pg_replication_streaming_replicas": (),
    "cnpg_backends_total": ("datname", "usename", "application_name", "state"),
    "cnpg_pg_settings_setting": ("name",),
    # redis_exporter v1.88.0: Redis's INFO fields carry no label of their own
    "redis_memory_used_bytes": (),
    "redis_memory_max_bytes": (),
    "redis_evicted_keys_total": (),
    # cert-manager v1.21.1, pkg/metrics/certificates.go
    "certmanager_certificate_expiration_timestamp_seconds": ("name", "namespace", "issuer_name", "issuer_kind",
                                                             "issuer_group"),
    "certmanager_certificate_renewal_timestamp_seconds": ("name", "namespace", "issuer_name", "issuer_kind",
                                                          "issuer_group"),
    # the Barman Cloud plugin v0.13.0: one value per instance, no label of its own
    "barman_cloud_cloudnative_pg_io_last_failed_backup_timestamp": (),
    "barman_cloud_cloudnative_pg_io_last_available_backup_timestamp": (),
    "barman_cloud_cloudnative_pg_io_first_recoverability_point": (),
}
"""Family -> the labels its exporter writes. DCGM's fields are added below (one label set for all)."""

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID",
               "DCGM_FI_DRIVER_VERSION", "namespace", "pod", "container")
"""dcgm-exporter 4.x: each GPU (or MIG instance: GPU_I_*), its host, the driver (a `label` field of the
GPU Operator's metrics list), and the pod using it (Kubernetes pod mapping)."""


@dataclass(frozen=True)
class Scrape:
    """How one place scrapes a source: the labels the target gets, and whether the exporter's win a collision."""
    adds: frozenset[str]
    honors_labels: bool = False

    def stored(self, own: tuple[str, ...]) -> dict[str, str]:
        """Each label of a family's series as stored, and who wrote it (the target or the exporter)."""
        labels = dict.fromkeys(self.adds, "target")
        for label in own:
            labels[f"exported_{label}" if label in self.adds and not self.honors_labels else label] = "exporter"
        return labels


_SERVICE_MONITOR = frozenset({"job", "instance", "namespace", "service", "pod", "container", "endpoint"})
_POD_MONITOR = _SERVICE_MONITOR - {"service"}
_LOCAL = frozenset({"job", "instance"})

SCRAPES: dict[Source, dict[str, Scrape]] = {
    metrics.VLLM: {"kubernetes": Scrape(_SERVICE_MONITOR), "local": Scrape(_LOCAL | {"engine"})},
    metrics.LITELLM: {"kubernetes": Scrape(_SERVICE_MONITOR), "local": Scrape(_LOCAL)},
    metrics.TENANTRY: {"kubernetes": Scrape(_SERVICE_MONITOR), "local": Scrape(_LOCAL)},
    metrics.PROMETHEUS: {"kubernetes": Scrape(_SERVICE_MONITOR), "local": Scrape(_LOCAL)},
    metrics.DCGM: {"kubernetes": Scrape(_SERVICE_MONITOR)},  # charts/gpu-operator/values.yaml: honorLabels false
    metrics.KUBE_STATE: {"kubernetes": Scrape(_SERVICE_MONITOR, honors_labels=True)},  # kube-prometheus-stack's
    metrics.CLOUDNATIVE_PG: {"kubernetes": Scrape(_POD_MONITOR)},
    metrics.BARMAN_CLOUD: {"kubernetes": Scrape(_POD_MONITOR)},
    metrics.REDIS_EXPORTER: {"kubernetes": Scrape(_SERVICE_MONITOR)},
    metrics.CERT_MANAGER: {"kubernetes": Scrape(_SERVICE_MONITOR)},  # the cert-manager chart's honorLabels: false
}
"""Where each source is scraped and how: on Kubernetes (the Prometheus Operator's monitors), and on the local
stack (tenantry/local/services.py's prometheus.yml) for the sources it runs."""


EMPTY_AT_TIMES: dict[str, frozenset[str]] = {
    # vLLM 0.32 vllm/v1/metrics/loggers.py: the adapters running and waiting, comma-joined; "" when none is.
    "vllm:lora_requests_info": frozenset({"waiting_lora_adapters", "running_lora_adapters"}),
}
"""Labels an exporter writes with an empty value at times. Prometheus stores no empty label, so a series may lack
them: a rule may read them, and must not count on them being there."""


def own_labels(family: str) -> tuple[str, ...]:
    source, _ = metrics.exported()[family]
    return DCGM_LABELS if source == metrics.DCGM else OWN_LABELS[family]


@cache
def stored_labels(family: str) -> frozenset[str]:
    """The labels a family's series carry in Prometheus wherever it is scraped, written by the same side in
    each (vLLM's `engine` is its index on Kubernetes and the target's name locally: neither is offered)."""
    own = own_labels(family)
    stored = [s.stored(own) for s in SCRAPES[metrics.exported()[family][0]].values()]
    return frozenset(label for label, by in stored[0].items() if all(other.get(label) == by for other in stored[1:]))
