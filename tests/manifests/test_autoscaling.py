"""An autoscaled engine through the mock runtime (stacks/h200-many-adapters.yaml: llama-70b, two to four
replicas): KEDA from its pinned chart, a ScaledObject valid against the pinned CRD, whose bounds are the
Plan's and whose triggers are the queries and thresholds the engine's alerts fire on."""

from __future__ import annotations

import copy
import re

import pytest

from tenantry.manifests.checks import policy_resources
from tenantry.manifests.cluster_policies import autoscaler_behaviour_in_range
from tenantry.manifests.engine_policies import engines_match_the_plan, engines_scale_within_the_plans_bounds
from tenantry.manifests.validate import validate_manifests
from tenantry.pins import chart
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import changed, shared_render

STACK = "h200-many-adapters"


@pytest.fixture(scope="module")
def stack():
    rendering = shared_render(STACK)
    return plan_stack(STACK), rendering, policy_resources(rendering)


def _scaled_object(rendering) -> dict:
    return next(m for m in rendering.manifests() if m["kind"] == "ScaledObject")


def test_the_engine_scales_between_the_plans_bounds_and_its_deployment_leaves_the_count_to_keda(stack):
    plan, rendering, resources = stack
    engine = plan.engine("llama-70b")
    assert (engine.replicas, engine.autoscaling.max_replicas) == (2, 4)
    # The pool has GPUs for the ceiling: four replicas of TP 2 on the node's eight.
    assert next(p for p in plan.pools if p.name == "h200").gpus_used == 8
    spec = _scaled_object(rendering)["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 4)
    # One replica at a time, once the signals have stayed low for as long as a replica takes to start.
    down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == engine.pod.startup_seconds == down["policies"][0]["periodSeconds"]
    assert autoscaler_behaviour_in_range(resources) == []
    # A period as long as a 40-minute start-up, as rendered before: KEDA takes the ScaledObject, the API server
    # refuses the HorizontalPodAutoscaler it writes, and the engine never scales.
    slow = changed(resources, "ScaledObject", "llama-70b", lambda props: props["spec"]["advanced"][
        "horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["policies"][0].update(periodSeconds=2400))
    assert autoscaler_behaviour_in_range(slow) == [
        "ScaledObject tenantry/llama-70b scaleDown policy periodSeconds is 2400: the API server accepts 1 to 1800"]
    assert spec["pollingInterval"] == engine.autoscaling.polling_seconds == 15  # the HPA's sync period
    deployment = next(m for m in rendering.manifests() if m["kind"] == "Deployment"
                      and m["metadata"]["name"] == "llama-70b")
    assert "replicas" not in deployment["spec"]
    keda = [r for r in resources if r.kind == "Release" and r.props.get("chart") == "keda"]
    assert [r.props.get("version") for r in keda] == [chart("keda").version]


def test_the_triggers_are_the_signals_the_engines_alerts_fire_on(stack):
    plan, rendering, _ = stack
    alerts = {rule["alert"]: rule["expr"] for m in rendering.manifests() if m["kind"] == "PrometheusRule"
              for group in m["spec"]["groups"] for rule in group["rules"]
              if rule.get("labels", {}).get("engine") == "llama-70b" and "alert" in rule}
    triggers = {t["name"]: t for t in _scaled_object(rendering)["spec"]["triggers"]}
    for name, alert in (("waiting", "EngineQueueBacklog"), ("kv-cache", "EngineKvCacheFull"),
                        ("ttft", "EngineTtftHigh")):
        trigger = triggers[name]
        assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
        assert alerts[alert] == f"{trigger['metadata']['query']} > {trigger['metadata']['threshold']}"
        assert re.fullmatch(r"http://kube-prometheus-stack-prometheus\.[a-z-]+\.svc:9090",
                            trigger["metadata"]["serverAddress"])
    # The thresholds by hand: admission's best-effort shedding (4 waiting, 92 % KV) and acme's 600 ms TTFT.
    assert [triggers[n]["metadata"]["threshold"] for n in ("waiting", "kv-cache", "ttft")] == ["4", "0.92", "0.6"]
    assert min(t.ttft_p95_ms for t in plan.tenants) == 600


@pytest.mark.parametrize(("change", "says"), [
    (lambda spec: spec.update(bogus=1), "spec: Additional properties are not allowed ('bogus' was unexpected)"),
    (lambda spec: spec.update(minReplicaCount="two"), "spec.minReplicaCount: 'two' is not of type 'integer'"),
    (lambda spec: spec.pop("scaleTargetRef"), "spec: 'scaleTargetRef' is a required property"),
    (lambda spec: spec["triggers"][0].pop("type"), "spec.triggers.0: 'type' is a required property"),
])
def test_the_pinned_crd_refuses_what_keda_would(stack, change, says):
    plan, rendering, _ = stack
    scaled = copy.deepcopy(_scaled_object(rendering))
    assert validate_manifests([scaled], plan.kubernetes_version) == []
    change(scaled["spec"])
    problems = validate_manifests([scaled], plan.kubernetes_version)
    assert any(says in p for p in problems), problems


def test_the_policies_catch_bounds_the_plan_did_not_decide(stack):
    plan, _, resources = stack
    assert engines_scale_within_the_plans_bounds(resources, plan) == []
    wider = changed(resources, "ScaledObject", "llama-70b", lambda p: p["spec"].update(maxReplicaCount=8))
    assert engines_scale_within_the_plans_bounds(wider, plan) == [
        "ScaledObject tenantry/llama-70b has maxReplicaCount 8, the plan says 4"]
    gone = [r for r in resources if r.kind != "ScaledObject"]
    assert engines_scale_within_the_plans_bounds(gone, plan) == [
        "engine llama-70b autoscales, but no ScaledObject scales it"]
    fixed = changed(resources, "Deployment", "llama-70b", lambda p: p["spec"].update(replicas=2))
    assert any("has 2 replicas, the plan says none (the autoscaler sets them)" in v
               for v in engines_match_the_plan(fixed, plan))
