"""A kv-aware engine through the mock runtime (stacks/h200-many-adapters.yaml: llama-70b, 2 to 4 replicas):
LiteLLM calls the engine's own Istio Gateway, whose HTTPRoute sends to the engine's InferencePool, picked by
llm-d's endpoint picker with one InferenceObjective per tier; every new object valid against the CRD of its
pinned release, the CRDs and Istio installed first, the picker restricted, and only the path's own pods reach
each hop. Each check is shown catching the change it exists for."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tenantry.deploy.endpoint_picker import PLUGINS
from tenantry.deploy.gateway import SELECTOR
from tenantry.manifests.checks import policy_violations
from tenantry.manifests.cluster_policies import service_monitors_find_their_targets
from tenantry.manifests.crd_policies import custom_resources_wait_for_their_crds
from tenantry.manifests.policies import (engines_reachable_only_from_gateway, nothing_is_public,
                                         versions_are_pinned)
from tenantry.manifests.routing_policies import engines_are_routed_as_planned
from tenantry.manifests.validate import validate_manifests
from tenantry.pins import IMAGES, chart
from tests.manifests.tampering import changed, manifest, planned_rendering

STACK = "h200-many-adapters"
KINDS = {"Gateway", "HTTPRoute", "InferencePool", "InferenceObjective", "DestinationRule"}


@pytest.fixture(scope="module")
def stack():
    return planned_rendering(STACK)


def test_litellm_calls_the_gateway_which_routes_to_the_pool_its_picker_picks_for(stack):
    plan, rendering, resources = stack
    config = yaml.safe_load(manifest(rendering, "ConfigMap", "tenantry-gateway")["data"]["config.yaml"])
    assert {m["litellm_params"]["api_base"] for m in config["model_list"]} == {
        "http://llama-70b-inference-istio.tenantry.svc:80/v1"}  # the engine and each of its adapters
    gateway = manifest(rendering, "Gateway", "llama-70b-inference")["spec"]
    assert gateway["gatewayClassName"] == "istio"
    # Where Istio 1.30.3 reads it (the Gateway's own annotations), not in spec.infrastructure, which it never reads.
    assert manifest(rendering, "Gateway", "llama-70b-inference")["metadata"]["annotations"][
        "networking.istio.io/service-type"] == "ClusterIP"
    assert "infrastructure" not in gateway
    route = manifest(rendering, "HTTPRoute", "llama-70b-inference")["spec"]
    assert route["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama-70b-pool"}]
    assert route["rules"][0]["timeouts"] == {"request": "600s"}  # as long as LiteLLM waits
    pool = manifest(rendering, "InferencePool", "llama-70b-pool")["spec"]
    assert pool == {"selector": {"matchLabels": {"app.kubernetes.io/name": "vllm", "tenantry.io/engine": "llama-70b"}},
                    "targetPorts": [{"number": 8000}], "appProtocol": "http",
                    "endpointPickerRef": {"name": "llama-70b-pool-epp", "port": {"number": 9002},
                                          "failureMode": "FailOpen"}}
    objectives = {m["metadata"]["name"]: m["spec"] for m in rendering.manifests() if m["kind"] == "InferenceObjective"}
    assert objectives == {f"llama-70b-{tier}": {"priority": priority, "poolRef": {
        "group": "inference.networking.k8s.io", "name": "llama-70b-pool"}}
        for tier, priority in (("guaranteed", 10), ("best-effort", 0), ("spot", -90))}
    settings = json.loads(manifest(rendering, "ConfigMap", "tenantry-gateway")["data"]["tenant-policy.json"])
    assert settings["engines"]["llama-70b"]["objectives"] == {
        "guaranteed": "llama-70b-guaranteed", "best-effort": "llama-70b-best-effort", "spot": "llama-70b-spot"}
    assert engines_are_routed_as_planned(resources, plan) == [] and policy_violations(rendering, plan) == []


def test_the_picker_runs_llm_ds_pinned_image_restricted_with_the_charts_flags_and_scorers(stack):
    _, rendering, _ = stack
    picker = manifest(rendering, "Deployment", "llama-70b-pool-epp")
    pod = picker["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGES["llm-d-epp"] == "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
    args = container["args"]
    assert args[:6] == ["--pool-name", "llama-70b-pool", "--pool-namespace", "tenantry",
                        "--pool-group", "inference.networking.k8s.io"]
    assert "--metrics-endpoint-auth=false" in args and args[args.index("--config-file") + 1] == "/config/default-plugins.yaml"
    security = container["securityContext"]
    assert (security["runAsNonRoot"], security["allowPrivilegeEscalation"], security["capabilities"],
            security["seccompProfile"]) == (True, False, {"drop": ["ALL"]}, {"type": "RuntimeDefault"})
    assert pod["serviceAccountName"] == "llama-70b-pool-epp" and pod["automountServiceAccountToken"] is True
    role = manifest(rendering, "Role", "llama-70b-pool-epp")
    assert all(set(rule["verbs"]) == {"get", "watch", "list"} for rule in role["rules"])  # it only reads
    plugins = yaml.safe_load(manifest(rendering, "ConfigMap", "llama-70b-pool-epp")["data"]["default-plugins.yaml"])
    assert plugins == PLUGINS
    assert {p["pluginRef"]: p["weight"] for p in plugins["schedulingProfiles"][0]["plugins"]} == {
        "queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3}
    rule = manifest(rendering, "DestinationRule", "llama-70b-pool-epp")["spec"]
    assert rule["host"] == "llama-70b-pool-epp.tenantry.svc.cluster.local" and rule["trafficPolicy"]["tls"]["mode"] == "SIMPLE"


def test_every_new_object_meets_its_pinned_crd_and_a_wrong_one_is_refused(stack):
    plan, rendering, _ = stack
    custom = [m for m in rendering.manifests() if m["kind"] in KINDS]
    assert {m["kind"] for m in custom} == KINDS
    assert validate_manifests(custom, plan.kubernetes_version) == []
    objective = copy.deepcopy(next(m for m in custom if m["kind"] == "InferenceObjective"))
    objective["spec"]["priority"] = "high"
    pool = copy.deepcopy(next(m for m in custom if m["kind"] == "InferencePool"))
    pool["spec"]["endpointPickerRef"]["failureMode"] = "FailSometimes"
    route = copy.deepcopy(next(m for m in custom if m["kind"] == "HTTPRoute"))
    route["spec"]["rules"][0]["backendRefs"][0]["weight"] = "all"
    problems = validate_manifests([objective, pool, route], plan.kubernetes_version)
    assert any("spec.priority: 'high' is not of type 'integer'" in p for p in problems), problems
    assert any("spec.endpointPickerRef.failureMode: 'FailSometimes' is not one of" in p for p in problems), problems
    assert any("spec.rules.0.backendRefs.0.weight: 'all' is not of type 'integer'" in p for p in problems), problems


def test_istio_and_the_crds_are_installed_first_from_their_pins(stack):
    _, rendering, resources = stack
    releases = {r.inputs["name"]: r.inputs for r in rendering.releases()}
    for name, chart_name in (("istio-base", "base"), ("istiod", "istiod")):
        assert (releases[name]["chart"], releases[name]["version"], releases[name]["namespace"],
                releases[name]["repositoryOpts"]["repo"]) == (
            chart_name, "1.30.3", "istio-system", "https://istio-release.storage.googleapis.com/charts")
    assert releases["istiod"]["values"]["env"] == {"ENABLE_GATEWAY_API_INFERENCE_EXTENSION": "true"}
    assert releases["istiod"]["values"]["gateways"]["seccompProfile"] == {"type": "RuntimeDefault"}
    crds = sorted(m["metadata"]["name"] for m in rendering.manifests() if m["kind"] == "CustomResourceDefinition")
    assert crds == ["gatewayclasses.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io",
                    "httproutes.gateway.networking.k8s.io", "inferenceobjectives.llm-d.ai",
                    "inferencepools.inference.networking.k8s.io"]
    assert custom_resources_wait_for_their_crds(resources) == [] and versions_are_pinned(resources) == []
    assert chart("istio-base").is_release_of(next(r.props for r in resources if r.kind == "Release"
                                                  and r.props.get("chart") == "base"))


def test_only_the_path_reaches_each_hop(stack):
    _, _, resources = stack
    monitoring = chart("kube-prometheus-stack").namespace
    policies = {r.metadata["name"]: r.props["spec"] for r in resources if r.kind == "NetworkPolicy"
                and r.metadata["name"].startswith("llama-70b-")}
    assert policies["llama-70b-inference-gateway"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": SELECTOR}}], "ports": [{"protocol": "TCP", "port": 80}]}]
    assert policies["llama-70b-routed"]["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "llama-70b-inference"}}},
        {"podSelector": {"matchLabels": {"llm-d-router-gateway": "llama-70b-pool-epp"}}}]
    assert engines_reachable_only_from_gateway(resources, SELECTOR, monitoring) == []
    # A Gateway that routes elsewhere is no peer of this engine's: opening the engine to it is caught.
    opened = changed(resources, "NetworkPolicy", "llama-70b-routed", lambda props: props["spec"]["ingress"][0][
        "from"].append({"podSelector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "other"}}}))
    assert any("reachable from {'podSelector': {'matchLabels': {'gateway.networking.k8s.io/gateway-name': 'other'}}}"
               in v for v in engines_reachable_only_from_gateway(opened, SELECTOR, monitoring))


def test_a_path_that_is_not_the_plans_is_caught(stack):
    plan, _, resources = stack

    def wider(props):
        props["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "vllm"}

    def to_the_service(props):
        props["spec"]["rules"][0]["backendRefs"] = [{"name": "llama-70b", "port": 8000}]

    def promoted(props):
        props["spec"]["priority"] = 10

    def exposed(props):  # as rendered before: the annotation where Istio never reads it, so a LoadBalancer
        del props["metadata"]["annotations"]
        props["spec"]["infrastructure"] = {"annotations": {"networking.istio.io/service-type": "ClusterIP"}}

    def direct(props):
        config = yaml.safe_load(props["data"]["config.yaml"])
        for model in config["model_list"]:
            model["litellm_params"]["api_base"] = "http://llama-70b.tenantry.svc:8000/v1"
        props["data"]["config.yaml"] = yaml.safe_dump(config)

    for kind, name, change, says in (
            ("InferencePool", "llama-70b-pool", wider, "not exactly the serving pods of llama-70b"),
            ("HTTPRoute", "llama-70b-inference", to_the_service, "not only InferencePool llama-70b-pool"),
            ("InferenceObjective", "llama-70b-spot", promoted, "'llama-70b-spot': 10"),
            ("Gateway", "llama-70b-inference", exposed, "would be LoadBalancer, not ClusterIP"),
            ("ConfigMap", "tenantry-gateway", direct, "LiteLLM calls 'llama-70b', not its Gateway's Service")):
        found = engines_are_routed_as_planned(changed(resources, kind, name, change), plan)
        assert any(says in v for v in found), (kind, found)
    assert nothing_is_public(resources) == []
    # The picker's ServiceMonitor selects its Service by the Service's labels (before: the pods' only, so the
    # picker was never scraped), and the one engine's too.
    assert service_monitors_find_their_targets(resources) == []
    unlabelled = changed(resources, "Service", "llama-70b-pool-epp",
                         lambda props: props["metadata"]["labels"].pop("llm-d-router-gateway"))
    assert service_monitors_find_their_targets(unlabelled) == [
        "ServiceMonitor tenantry/llama-70b-pool-epp selects no Service (labels {'matchLabels': "
        "{'llm-d-router-gateway': 'llama-70b-pool-epp'}} in ['tenantry']): nothing is scraped"]
    renamed = changed(resources, "Service", "llama-70b-pool-epp",
                      lambda props: props["spec"]["ports"][1].update(name="metrics"))
    assert service_monitors_find_their_targets(renamed) == [
        "ServiceMonitor tenantry/llama-70b-pool-epp scrapes port 'http-metrics', which Service "
        "tenantry/llama-70b-pool-epp does not name (it has ['grpc-ext-proc', 'metrics'])"]
    assert nothing_is_public(changed(resources, "Gateway", "llama-70b-inference", exposed)) == [
        "Gateway tenantry/llama-70b-inference's Service would be LoadBalancer: Istio creates it reachable from "
        "outside the cluster"]
