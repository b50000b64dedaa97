"""Every label a rule uses is a label its series carry: the catalog's labels are read
again from the installed vLLM, LiteLLM and plugin, and the label flow of every
shipped stack's rules has nothing missing; a rule that matches, groups, joins,
copies or templates a missing label is caught (the live scrape's labels are
tests/local/test_metrics_live.py's)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tenantry.monitoring import metrics, rules
from tenantry.monitoring.label_flow import LabelFlow, rule_problems
from tenantry.monitoring.metric_labels import EMPTY_AT_TIMES, OWN_LABELS, own_labels, stored_labels
from tenantry.stacks import plan_stack
from tests.unit.test_metrics_catalog import installed

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


@pytest.mark.parametrize("stack", STACKS)
def test_every_label_the_rules_of_a_stack_use_is_carried_by_their_series(stack):
    assert rule_problems([r for g in rules.rule_groups(plan_stack(stack)) for r in g["rules"]]) == []


def test_every_family_of_the_catalog_has_its_labels():
    families = set(metrics.exported())
    assert not {f for f in families if metrics.exported()[f][0] != metrics.DCGM} - set(OWN_LABELS)
    assert not set(OWN_LABELS) - families, "labels for a family the catalog does not export"
    assert {f: sorted(labels - set(own_labels(f))) for f, labels in EMPTY_AT_TIMES.items()
            if labels - set(own_labels(f))} == {}, "a label left empty at times that its exporter does not write"


def _vllm_declarations() -> dict[str, tuple[str, ...] | None]:
    """Each vllm: family the pinned vLLM declares (loggers.py's calls with name= and labelnames=), with its
    labelnames: the shared `labelnames` list, plus a literal list, or a literal list; None where it is built
    from attributes (vllm:lora_requests_info's max_lora, ...)."""
    tree = ast.parse((installed("vllm", ".venv-vllm") / "v1" / "metrics" / "loggers.py").read_text(encoding="utf-8"))
    shared = next(tuple(ast.literal_eval(n.value)) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and [getattr(t, "id", None) for t in n.targets] == ["labelnames"])

    def labels(node: ast.expr) -> tuple[str, ...] | None:
        if isinstance(node, ast.Name) and node.id == "labelnames":
            return shared
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = labels(node.left), labels(node.right)
            return None if left is None or right is None else left + right
        try:
            return tuple(ast.literal_eval(node))
        except ValueError:
            return None

    declared = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        keywords = {k.arg: k.value for k in call.keywords}
        name = keywords.get("name")
        if isinstance(name, ast.Constant) and str(name.value).startswith("vllm:") and "labelnames" in keywords:
            declared[name.value] = labels(keywords["labelnames"])
    return declared


def test_the_vllm_labels_are_those_the_pinned_vllm_declares():
    declared = _vllm_declarations()
    for family in metrics.names_of(metrics.VLLM):
        name = family.removesuffix("_total") if metrics.exported()[family][1] == "counter" else family
        if declared[name] is None:
            assert family == "vllm:lora_requests_info"
            continue
        assert set(own_labels(family)) == set(declared[name]), family


def test_the_litellm_labels_are_those_the_pinned_litellm_declares():
    from litellm.types.integrations.prometheus import PrometheusMetricLabels

    for family in metrics.names_of(metrics.LITELLM):
        base = family.removesuffix("_total") if metrics.exported()[family][1] == "counter" else family
        service = re.fullmatch(r"litellm_(postgres|redis)_(total_requests|failed_requests|latency)", base)
        if service:
            expected = [service[1], *(["error_class", "function_name"] if service[2] == "failed_requests" else [])]
        elif base in ("litellm_in_flight_requests", "litellm_redis_circuit_breaker_state"):
            continue  # declared where they are set (the in-flight middleware, the Redis breaker): read below
        else:
            expected = PrometheusMetricLabels.get_labels(label_name=base)
        assert set(own_labels(family)) == set(expected), family


def test_the_plugins_labels_are_those_it_registers():
    from types import SimpleNamespace

    from prometheus_client import REGISTRY

    import tests.unit.policy_plugin as plugin

    collectors = REGISTRY._names_to_collectors  # noqa: SLF001 - prometheus_client has no public lookup
    before = set(collectors.values())
    # The latency histograms are registered when the plugin starts, with the tenants' objectives as buckets;
    # ones made here for their labels are unregistered again, or the plugin's tests would find their buckets.
    made = [h for h in plugin.outcomes.latency_histograms(SimpleNamespace(tenants={})) if h not in before]
    try:
        labels = {family: set(collectors[family]._labelnames) for family in metrics.names_of(metrics.TENANTRY)}  # noqa: SLF001
    finally:
        for histogram in made:
            REGISTRY.unregister(histogram)
    assert {family: set(own_labels(family)) for family in labels} == labels


def test_a_label_two_places_write_differently_is_offered_by_neither():
    """vLLM's `engine` is its engine index; the local stack's engine jobs add the engine's name as `engine`."""
    assert "engine" in own_labels("vllm:num_requests_running")
    assert "engine" not in stored_labels("vllm:num_requests_running")
    assert "exported_namespace" in stored_labels("certmanager_certificate_expiration_timestamp_seconds")
    assert "namespace" in stored_labels("kube_deployment_status_replicas_available")


@pytest.mark.parametrize(("expr", "problem"), [
    ('sum(rate(vllm:num_preemptions_total{job="tiny", reason="x"}[5m]))', "selected by ['reason']"),
    ("sum by (tenant) (rate(vllm:num_preemptions_total[5m]))", "groups by ['tenant']"),
    ("vllm:num_requests_running > on (tenant) sum by (job, tenant) (tenantry_tenant_requests_total)",
     "`> on` joins by ['tenant']"),
    ("up * on (job) group_left (tier) max by (job) (up)", "group_left copies ['tier']"),
    ('label_replace(up, "tenant", "$1", "team_alias", "(.+)")', "label_replace reads ['team_alias']"),
    ("histogram_quantile(0.9, sum by (job) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
     "histogram_quantile reads ['le']"),
])
def test_a_label_the_series_lack_is_found(expr, problem):
    flow = LabelFlow()
    flow.result(expr, "rule")
    assert len(flow.problems) == 1 and problem in flow.problems[0], flow.problems


@pytest.mark.parametrize("expr", [
    'sum by (job) (rate(vllm:num_preemptions_total{job="tiny", reason=""}[5m]))',  # absent label reads as ""
    'sum without (model_name) (vllm:num_requests_running{reason!="x"})',
    'label_replace(rate(litellm_spend_metric_total[5m]), "direction", "in", "", "")',
    "histogram_quantile(0.9, sum by (le, job) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
    "up == 0 or absent(up{job=\"tiny\"})",
])
def test_labels_the_series_carry_or_do_not_need_pass(expr):
    flow = LabelFlow()
    flow.result(expr, "rule")
    assert flow.problems == []


def test_labels_flow_through_recording_rules_into_an_alerts_templates():
    recorded = {"record": "tenantry:x:rate5m", "expr": "sum by (tenant) (rate(tenantry_tenant_requests_total[5m]))"}
    reads_tier = {"alert": "A", "expr": "tenantry:x:rate5m > 1", "annotations": {"summary": "{{ $labels.tier }}"}}
    reads_tenant = {"alert": "B", "expr": "tenantry:x:rate5m > 1", "annotations": {"summary": "{{ $labels.tenant }}"}}
    joins = {"alert": "C", "expr": 'tenantry:x:rate5m > on (tenant, tier) tenantry:x:rate5m{tier="spot"}'}
    problems = rule_problems([recorded, reads_tier, reads_tenant, joins])
    assert [p.split(":")[0] for p in problems] == ["A", "C", "C", "C"], problems
    # a one-to-one match `on` keeps only its labels: the template that reads another is blank
    only_on = {"alert": "D", "expr": "tenantry:x:rate5m > on () vector(1)", "annotations": {"s": "{{ $labels.tenant }}"}}
    assert rule_problems([recorded, only_on]) == ["D: its annotations read $labels. ['tenant'], which its series lack "
                                                  "(they carry [])"]
