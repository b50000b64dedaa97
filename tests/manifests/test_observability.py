"""What on-call gets on Kubernetes, for every shipped stack through the Pulumi
program under the mock runtime: the Plan's rules as a PrometheusRule, its
dashboards as ConfigMaps Grafana's sidecar loads, Alertmanager's routing in
the kube-prometheus-stack release with the webhook URLs kept in a Secret,
and kube-state-metrics exporting the node labels the rules read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pulumi
import pytest

from tenantry.deploy.common import labels
from tenantry.deploy.observability import (
    DASHBOARD_LABEL, NODE_LABELS_FOR_RULES, WEBHOOK_CONFIG, WEBHOOK_MOUNT, WEBHOOK_SECRET)
from tenantry.manifests.checks import check_rendering
from tenantry.manifests.offline import OFFLINE_CONFIG, Secret, render
from tenantry.monitoring.alertmanager import Webhook, alertmanager_config
from tenantry.monitoring.dashboards import dashboards
from tenantry.monitoring.rules import rule_groups
from tenantry.pins import chart
from tenantry.stacks import plan_stack, stack_path

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
WEBHOOKS = {"page": "https://pager.example/hook/s3cret", "ticket": "https://tickets.example/hook/t0ken"}
MONITORING = chart("kube-prometheus-stack").namespace


def with_webhooks(**urls: str) -> dict[str, str]:
    return {**OFFLINE_CONFIG, **{f"tenantry:{WEBHOOK_CONFIG[r]}": url for r, url in urls.items()}}


@pytest.fixture(scope="module", params=STACKS)
def rendered(request):
    return plan_stack(request.param), render(stack_path(request.param), request.param, with_webhooks(**WEBHOOKS))


def _object(rendering, kind: str, name: str, namespace: str = MONITORING) -> dict:
    found = [m for m in rendering.manifests() if m["kind"] == kind and m["metadata"]["name"] == name
             and m["metadata"].get("namespace") == namespace]
    assert len(found) == 1, f"{kind} {namespace}/{name}: {len(found)} rendered"
    return found[0]


def _stack_release(rendering):
    return next(r for r in rendering.releases() if r.inputs["chart"] == "kube-prometheus-stack")


def test_every_object_is_valid_and_every_policy_holds_with_webhooks_set(rendered):
    plan, rendering = rendered
    assert check_rendering(rendering, plan) == []


def test_the_prometheus_rule_holds_every_rule_group_of_the_plan(rendered):
    plan, rendering = rendered
    rule = _object(rendering, "PrometheusRule", "tenantry")
    assert rule["spec"]["groups"] == json.loads(json.dumps(list(rule_groups(plan))))
    assert rule["metadata"]["labels"] == labels("monitoring")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and all(a["annotations"]["runbook_url"].endswith(f"/{a['alert']}.md") for a in alerts)


def test_each_dashboard_is_a_config_map_grafanas_sidecar_loads(rendered):
    plan, rendering = rendered
    sidecar = chart("kube-prometheus-stack").values["grafana"]["sidecar"]["dashboards"]
    models = dashboards(plan)
    assert models
    for file_name, model in models.items():
        config_map = _object(rendering, "ConfigMap", f"tenantry-dashboard-{file_name.removesuffix('.json')}")
        assert config_map["metadata"]["labels"][sidecar["label"]] == sidecar["labelValue"] == "1"
        assert sidecar["label"] == DASHBOARD_LABEL
        assert json.loads(config_map["data"][file_name]) == json.loads(json.dumps(model))


def test_the_release_values_carry_alertmanagers_routing_reading_each_url_from_the_mounted_secret(rendered):
    plan, rendering = rendered
    values = _stack_release(rendering).inputs["values"]
    receivers = {r: Webhook(url_file=f"{WEBHOOK_MOUNT}/{r}") for r in WEBHOOKS}
    assert values["alertmanager"]["config"] == json.loads(json.dumps(alertmanager_config(plan, receivers)))
    assert values["alertmanager"]["alertmanagerSpec"]["secrets"] == [WEBHOOK_SECRET]
    assert not any(url in json.dumps(values) for url in WEBHOOKS.values())
    secret = _object(rendering, "Secret", WEBHOOK_SECRET)
    assert secret["stringData"] == Secret(WEBHOOKS)  # Pulumi marks the whole map secret


def test_alertmanager_starts_after_its_webhook_secret_exists(rendered):
    _, rendering = rendered
    secret = next(r for r in rendering.of_type("Secret") if r.inputs["metadata"]["name"] == WEBHOOK_SECRET)
    assert secret.urn in _stack_release(rendering).dependencies


def test_no_scrape_or_alert_waits_on_a_control_plane_the_cluster_does_not_expose(rendered):
    """Not rendered by Helm here: the pinned chart gates the scrape, the rule groups and KubeSchedulerDown,
    KubeControllerManagerDown, KubeProxyDown and etcd's alerts on `<component>.enabled`
    (hack/sync_prometheus_rules), which every environment tenantry supports must set off."""
    plan, rendering = rendered
    values = _stack_release(rendering).inputs["values"]
    assert plan.cluster.environment in ("eks", "gke", "aks", "bare-metal")
    for component in ("kubeScheduler", "kubeControllerManager", "kubeEtcd", "kubeProxy"):
        assert values[component] == {"enabled": False}, component


def test_kube_state_metrics_exports_every_node_label_the_rules_read(rendered):
    plan, rendering = rendered
    allowed = _stack_release(rendering).inputs["values"]["kube-state-metrics"]["metricLabelsAllowlist"]
    assert allowed == [f"nodes=[{','.join(NODE_LABELS_FOR_RULES)}]"]
    # kube-state-metrics names a node label label_<name>, every character outside [a-zA-Z0-9_] as _.
    exported = {"label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label) for label in NODE_LABELS_FOR_RULES}
    exprs = " ".join(r["expr"] for g in rule_groups(plan) for r in g["rules"] if "kube_node_labels" in r["expr"])
    assert set(re.findall(r"\blabel_[a-zA-Z0-9_]+", exprs)) <= exported


def test_a_receiver_without_a_webhook_url_gets_no_integration_and_a_warning(monkeypatch):
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warnings.append(message))
    rendering = render(stack_path("local"), "local", with_webhooks(page=WEBHOOKS["page"]))
    config = _stack_release(rendering).inputs["values"]["alertmanager"]["config"]
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["page"]["webhook_configs"] == [{"url_file": f"{WEBHOOK_MOUNT}/page", "send_resolved": True}]
    assert "webhook_configs" not in receivers["ticket"]
    assert _object(rendering, "Secret", WEBHOOK_SECRET)["stringData"] == Secret({"page": WEBHOOKS["page"]})
    assert [w for w in warnings if "tenantry:ticketWebhookUrl is not set" in w
            and "pulumi config set --secret tenantry:ticketWebhookUrl" in w], warnings
    assert not [w for w in warnings if "pageWebhookUrl" in w]
