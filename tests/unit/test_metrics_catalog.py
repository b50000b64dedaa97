"""The metric catalog names only what its sources export at their pinned versions,
read from the installed sources themselves (the live check is tests/local/test_metrics_live.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tenantry.monitoring import metrics

REPO = Path(__file__).resolve().parent.parent.parent


def installed(package: str, venv: str) -> Path:
    (found,) = (REPO / venv / "lib").glob(f"python3.*/site-packages/{package}")
    return found


def source_text(folder: Path, pattern: str = "*.py") -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob(pattern))


def declared_name(name: str, kind: str) -> str:
    """The name as a prometheus_client declaration writes it: a counter without its `_total`."""
    return name.removesuffix("_total") if kind == "counter" else name


def test_every_vllm_name_is_declared_by_the_pinned_vllm():
    vllm = installed("vllm", ".venv-vllm")
    text = source_text(vllm / "v1" / "metrics") + source_text(vllm / "v1" / "spec_decode")
    missing = [n for n, kind in metrics.names_of(metrics.VLLM).items() if f'"{declared_name(n, kind)}"' not in text]
    assert not missing, f"not in vLLM {vllm}: {missing}"


def test_every_litellm_name_is_declared_by_the_pinned_litellm():
    litellm = installed("litellm", ".venv")
    text = source_text(litellm / "integrations") + source_text(litellm / "types" / "integrations")
    from litellm.types.services import ServiceTypes

    services = {s.value for s in ServiceTypes}
    service_metric = re.compile(r"litellm_(?P<service>.+)_(?P<kind>total_requests|failed_requests|latency)")

    def declared(name: str, kind: str) -> bool:
        base = declared_name(name, kind)
        if f'"{base}"' in text:
            return True
        # prometheus_services.py names each service's metrics f"litellm_{service}_{type_of_request}"
        match = service_metric.fullmatch(base)
        return bool(match and match["service"] in services and 'f"litellm_{service}_{type_of_request}"' in text)

    missing = [n for n, kind in metrics.names_of(metrics.LITELLM).items() if not declared(n, kind)]
    assert not missing, f"not in LiteLLM {litellm}: {missing}"



def test_every_litellm_service_the_catalog_names_is_written_by_the_pinned_litellm():
    """A service's metrics are declared for every ServiceTypes member, but only written where LiteLLM logs a call
    to that service: batch_write_to_db has no caller in 1.108.7, so a rule on it never fires."""
    litellm = installed("litellm", ".venv")
    from litellm.types.services import ServiceTypes

    callers = "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in litellm.rglob("*.py")
                        if (litellm / "types") not in f.parents)
    written = {s.value for s in ServiceTypes if f"ServiceTypes.{s.name}" in callers}
    service_metric = re.compile(r"litellm_(?P<service>.+)_(?:total_requests|failed_requests)_total|litellm_(?P<h>.+)_latency")
    named = {m["service"] or m["h"] for n in metrics.names_of(metrics.LITELLM) if (m := service_metric.fullmatch(n))}
    named &= {s.value for s in ServiceTypes}
    assert named and named <= written, f"never written by LiteLLM: {named - written}"


def test_every_tenantry_name_is_declared_by_the_plugin():
    text = source_text(REPO / "tenantry" / "gateway", "tenant_policy*.py")
    # The plugin writes a counter's full name (prometheus_client accepts either spelling).
    missing = [n for n, kind in metrics.names_of(metrics.TENANTRY).items()
               if f'"{n}"' not in text and f'"{declared_name(n, kind)}"' not in text]
    assert not missing


def test_the_gpu_health_counters_the_alerts_need_are_collected():
    fields = metrics.dcgm_fields()
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"} <= set(fields)
    assert set(fields.values()) <= {"gauge", "counter", "label"}


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (tenant) (rate(tenantry_tenant_slo_misses_total{objective="ttft"}[5m]))', {"tenantry_tenant_slo_misses_total"}),
    ("histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
     {"vllm:time_to_first_token_seconds_bucket"}),
    ('absent(up{job="tiny"}) or max_over_time(DCGM_FI_DEV_GPU_TEMP[5m:1m]) > 85', {"up", "DCGM_FI_DEV_GPU_TEMP"}),
])
def test_metric_names_are_read_from_the_parsed_expression(expr, names):
    assert metrics.metric_names(expr) == names
    assert metrics.unknown_metrics(expr) == set()


def test_a_misspelt_metric_is_unknown_and_a_recorded_one_is_not():
    assert metrics.unknown_metrics("rate(vllm:num_preemption_total[5m])") == {"vllm:num_preemption_total"}
    assert metrics.unknown_metrics("vllm:kv_cache_usage_perc_bucket") == {"vllm:kv_cache_usage_perc_bucket"}
    assert metrics.unknown_metrics("tenantry:x:rate5m > 1", recorded={"tenantry:x:rate5m"}) == set()


def test_a_selector_without_a_name_cannot_be_checked():
    with pytest.raises(metrics.UnknownMetric, match="without a metric name"):
        metrics.metric_names('{__name__=~"vllm:.*"}')


def test_kubernetes_only_metrics_are_told_apart():
    assert metrics.kubernetes_only("DCGM_FI_DEV_GPU_UTIL + on() group_left vllm:num_requests_running") == \
        {"DCGM_FI_DEV_GPU_UTIL"}
