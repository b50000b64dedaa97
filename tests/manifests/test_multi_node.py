"""An engine whose replica spans two nodes through the mock runtime (stacks/h100x16-405b.yaml: Llama 3.1 405B,
TP 8 x PP 2): a LeaderWorkerSet valid against the pinned CRD of LWS v0.10.0, installed from its pinned chart,
whose leader serves the API and whose worker runs the second stage headless, each with the Plan's arguments
and a whole node's GPUs; the stages reach each other and nobody else reaches them."""

from __future__ import annotations

import copy

import pytest

from tenantry.configs.vllm import stage_args, vllm_args
from tenantry.deploy.gateway import SELECTOR
from tenantry.deploy.model_cache import ADAPTERS_DIR, WEIGHTS_DIR
from tenantry.manifests.checks import policy_violations
from tenantry.manifests.crd_policies import custom_resources_wait_for_their_crds
from tenantry.manifests.engine_policies import (engines_match_the_plan, group_names,
                                                groups_leave_the_controller_its_names)
from tenantry.manifests.policies import engines_reachable_only_from_gateway, versions_are_pinned
from tenantry.manifests.validate import validate_manifests
from tenantry.pins import chart
from tests.manifests.tampering import changed, manifest, planned_rendering

STACK = "h100x16-405b"
LEADER = "$(LWS_LEADER_ADDRESS)"


@pytest.fixture(scope="module")
def stack():
    return planned_rendering(STACK)


def _vllm(template: dict) -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == "vllm")


def test_the_replica_is_a_group_of_a_leader_and_a_worker_each_with_a_node(stack):
    plan, rendering, _ = stack
    engine = plan.engine("llama-405b")
    group = manifest(rendering, "LeaderWorkerSet", "llama-405b")
    assert not [m for m in rendering.manifests() if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-405b"]
    spec = group["spec"]
    template = spec["leaderWorkerTemplate"]
    assert (spec["replicas"], template["size"], template["restartPolicy"]) == (1, 2, "RecreateGroupOnPodRestart")
    leader, worker = _vllm(template["leaderTemplate"]), _vllm(template["workerTemplate"])
    plain = vllm_args(engine, model=WEIGHTS_DIR, adapter_dir=ADAPTERS_DIR)
    assert plain[plain.index("--pipeline-parallel-size") + 1] == "2"
    assert leader["args"] == [*plain, "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0",
                              "--master-addr", LEADER, "--master-port", "29501"]
    assert worker["args"] == [*plain, *stage_args(engine, rank="$(LWS_WORKER_INDEX)", leader=LEADER)]
    assert worker["args"][-1] == "--headless" and "--headless" not in leader["args"]
    for container in (leader, worker):  # a whole node each: its eight GPUs
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # Only the leader serves the API: its probes and port; the worker has none to probe.
    assert "startupProbe" in leader and leader["ports"] == [{"name": "http", "containerPort": 8000}]
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(worker)
    service = manifest(rendering, "Service", "llama-405b-api")
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_the_controller_gets_every_name_it_derives_and_the_gateway_calls_the_api_service(stack):
    """The pinned LWS controller makes the group's headless Service (`llama-405b`) only where no Service of that
    name exists; it is what LWS_LEADER_ADDRESS resolves through. tenantry's API Service is named apart, and the
    gateway calls that one."""
    plan, rendering, resources = stack
    group = next(r for r in resources if r.kind == "LeaderWorkerSet")
    names = group_names(group)
    namespace = group.namespace
    assert names.headless_service(0) == "llama-405b"
    assert names.leader_address(0) == f"llama-405b-0.llama-405b.{namespace}"
    taken = [r.label for r in resources if r.namespace == namespace and names.owns(r.kind, r.metadata.get("name", ""))]
    assert taken == []
    assert groups_leave_the_controller_its_names(resources) == []
    config = manifest(rendering, "ConfigMap", "tenantry-gateway")["data"]["config.yaml"]
    assert f"http://llama-405b-api.{namespace}.svc:8000/v1" in config
    # As rendered before the fix: the API Service took the group's name, and the group could never form.
    squatted = changed(resources, "Service", "llama-405b-api",
                       lambda props: props["metadata"].update(name="llama-405b"))
    assert groups_leave_the_controller_its_names(squatted) == [
        f"Service {namespace}/llama-405b takes a name the LeaderWorkerSet controller derives for group llama-405b: "
        f"the controller would not create its headless Service, and the leader's address "
        f"(llama-405b-0.llama-405b.{namespace}) would not resolve"]
    # Per replica under UniquePerReplica: `<group>-<replica>` is the controller's then, the group's own name is not.
    unique = changed(resources, "LeaderWorkerSet", "llama-405b",
                     lambda props: props["spec"].update(networkConfig={"subdomainPolicy": "UniquePerReplica"}))
    per_replica = group_names(next(r for r in unique if r.kind == "LeaderWorkerSet"))
    assert per_replica.leader_address(1) == f"llama-405b-1.llama-405b-1.{namespace}"
    assert per_replica.owns("Service", "llama-405b-3") and not per_replica.owns("Service", "llama-405b")


def test_the_group_meets_the_pinned_crd_and_waits_for_the_controller_it_needs(stack):
    plan, rendering, resources = stack
    group = manifest(rendering, "LeaderWorkerSet", "llama-405b")
    assert validate_manifests([group], plan.kubernetes_version) == []
    broken = copy.deepcopy(group)
    broken["spec"]["leaderWorkerTemplate"]["size"] = "two"
    assert any("spec.leaderWorkerTemplate.size: 'two' is not of type 'integer'" in p
               for p in validate_manifests([broken], plan.kubernetes_version))
    release = next(r for r in rendering.releases() if r.inputs["name"] == "lws")
    pin = chart("lws")
    assert (release.inputs["chart"], release.inputs["version"], release.inputs["namespace"]) == (
        "oci://registry.k8s.io/lws/charts/lws", "0.10.0", "lws-system")
    assert release.inputs["values"]["image"]["manager"]["tag"] == "v0.10.0"  # not the chart source's `main`
    assert pin.is_release_of(next(r for r in resources if r.kind == "Release" and r.name.endswith("-lws")).props)
    assert custom_resources_wait_for_their_crds(resources) == [] and versions_are_pinned(resources) == []
    assert policy_violations(rendering, plan) == []


def test_only_the_engines_own_pods_reach_its_stages(stack):
    _, _, resources = stack
    stages = next(r for r in resources if r.kind == "NetworkPolicy" and r.metadata.get("name") == "llama-405b-stages")
    assert stages.props["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "vllm", "tenantry.io/engine": "llama-405b"}}}]}]
    assert engines_reachable_only_from_gateway(resources, SELECTOR, chart("kube-prometheus-stack").namespace) == []
    opened = changed(resources, "NetworkPolicy", "llama-405b-stages", lambda props: props["spec"]["ingress"][0][
        "from"].append({"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}))
    assert any("reachable from {'podSelector': {'matchLabels': {'app.kubernetes.io/name': 'redis'}}}" in v
               for v in engines_reachable_only_from_gateway(opened, SELECTOR, chart("kube-prometheus-stack").namespace))


def test_a_group_that_is_not_the_plans_is_caught(stack):
    plan, _, resources = stack

    def smaller(props):
        props["spec"]["leaderWorkerTemplate"]["size"] = 1

    def alone(props):
        props["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"

    def no_rank(props):
        props["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"].remove("--headless")

    assert engines_match_the_plan(resources, plan) == []
    assert any("groups of 1 pods, the plan says 2" in v
               for v in engines_match_the_plan(changed(resources, "LeaderWorkerSet", "llama-405b", smaller), plan))
    assert any("restarts a pod alone" in v
               for v in engines_match_the_plan(changed(resources, "LeaderWorkerSet", "llama-405b", alone), plan))
    assert any("runs vLLM with" in v
               for v in engines_match_the_plan(changed(resources, "LeaderWorkerSet", "llama-405b", no_rank), plan))
