"""Each policy catches what it is for: a rendering that is fine except for one
injected fault fails exactly that policy, naming the resource."""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable

import pytest

from tenantry.manifests import cluster_policies, crd_policies, engine_policies
from tenantry.manifests import policies as rules
from tenantry.manifests.resources import Resource, containers, from_policy_props, pod_spec
from tenantry.manifests.checks import policy_resources
from tenantry.deploy.gateway import PORT as GATEWAY_PORT, SELECTOR as GATEWAY_SELECTOR
from tenantry.manifests.offline import Secret
from tenantry.pins import chart
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

MONITORING = chart("kube-prometheus-stack").namespace


@pytest.fixture(scope="module")
def clean():
    plan = plan_stack("h100-mig-mixed")
    return plan, policy_resources(shared_render("h100-mig-mixed"))


def _find(resources: list[Resource], kind: str, name: str, namespace: str | None = None) -> Resource:
    return next(r for r in resources if r.kind == kind and r.metadata.get("name") == name
                and (namespace is None or r.namespace == namespace))


def _container(resource: Resource, name: str) -> dict:
    return next(c for c in containers(resource) if c["name"] == name)


def drop_quota(rs):
    rs.remove(_find(rs, "ResourceQuota", "tenantry-quota", "tenant-partner-api"))


def drop_limit_range(rs):
    rs.remove(_find(rs, "LimitRange", "tenantry-limits", "tenant-assistant"))


def weaken_default_deny(rs):
    _find(rs, "NetworkPolicy", "tenantry-isolation", "tenant-assistant").props["spec"]["policyTypes"] = ["Ingress"]


def let_a_tenant_in(rs):
    _find(rs, "NetworkPolicy", "tenantry-isolation", "tenant-assistant").props["spec"]["ingress"] = [{}]


def let_a_tenant_reach_an_engine(rs):
    # the gateway's rule, aimed at the engines' pods: same namespace and port shape, another peer
    rule = copy.deepcopy(_find(rs, "NetworkPolicy", "tenantry-isolation", "tenant-assistant").props["spec"]["egress"][1])
    rule["to"][0]["podSelector"] = {"matchLabels": {"tenantry.io/engine": "qwen-7b"}}
    rs.append(dataclasses.replace(_find(rs, "NetworkPolicy", "tenantry-isolation", "tenant-assistant"), props={
        "metadata": {"name": "extra", "namespace": "tenant-assistant"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [rule]}}))


def open_engine_to_a_tenant(rs):
    policy = _find(rs, "NetworkPolicy", "tenantry-engines")
    policy.props["spec"]["ingress"][0]["from"].append(
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tenant-partner-api"}}})


def open_engine_to_everyone(rs):
    _find(rs, "NetworkPolicy", "tenantry-engines").props["spec"]["ingress"] = [{}]


def expose_engine(rs):
    _find(rs, "Service", "qwen-7b").props["spec"]["type"] = "LoadBalancer"


def open_the_gateway_by_node_port(rs):
    _find(rs, "Service", "tenantry-gateway").props["spec"]["type"] = "NodePort"


def gateway_scales_down_in_an_hour_long_period(rs):
    hpa = _find(rs, "HorizontalPodAutoscaler", "tenantry-gateway")
    hpa.props["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 3600,
                                                   "policies": [{"type": "Pods", "value": 1, "periodSeconds": 3600}]}}


def drop_engine_policy(rs):
    rs.remove(_find(rs, "NetworkPolicy", "tenantry-engines"))


def drop_limits(rs):
    del _container(_find(rs, "Deployment", "tenantry-redis"), "redis")["resources"]["limits"]


def unpinned_image(rs):
    _container(_find(rs, "Deployment", "tenantry-gateway"), "litellm")["image"] = "ghcr.io/berriai/litellm:latest"


def malformed_image_digest(rs):
    container = _container(_find(rs, "Deployment", "tenantry-gateway"), "litellm")
    container["image"] += "@sha256:0123abcd"


def other_chart_version(rs):
    release = next(r for r in rs if r.kind == "Release" and r.props["chart"] == "gpu-operator")
    release.props["version"] = "v25.3.0"


def secret_in_config_map(rs):
    _find(rs, "ConfigMap", "tenantry-gateway").props["data"]["leak"] = Secret("sk-123")


def secret_as_env_literal(rs):
    _container(_find(rs, "Deployment", "tenantry-gateway"), "litellm")["env"].append(
        {"name": "LITELLM_MASTER_KEY", "value": Secret("sk-123")})


def tp_on_mig(rs):
    args = _container(_find(rs, "Deployment", "qwen-7b"), "vllm")["args"]
    args[args.index("--tensor-parallel-size") + 1] = "2"


def gpus_not_matching_tp(rs):
    _container(_find(rs, "Deployment", "llama-70b"), "vllm")["resources"]["limits"]["nvidia.com/gpu"] = "2"


def args_not_from_plan(rs):
    args = _container(_find(rs, "Deployment", "mistral-7b"), "vllm")["args"]
    args[args.index("--max-num-seqs") + 1] = "512"


def engine_started_by_module_path(rs):
    _container(_find(rs, "Deployment", "mistral-7b"), "vllm")["command"] = [
        "python3", "-m", "vllm.entrypoints.openai.api_server"]


def replicas_not_from_plan(rs):
    _find(rs, "Deployment", "llama-3b").props["spec"]["replicas"] = 3


def _claim(rs, deployment: str, volume: str) -> Resource:
    spec = pod_spec(_find(rs, "Deployment", deployment))
    name = next(v for v in spec["volumes"] if v["name"] == volume)["persistentVolumeClaim"]["claimName"]
    return _find(rs, "PersistentVolumeClaim", name)


def model_volume_sized_from_fp8_weights(rs):
    # What the volume was before it followed the bf16 checkpoint vLLM downloads and quantises on load.
    _claim(rs, "llama-70b", "weights").props["spec"]["resources"]["requests"]["storage"] = "80896Mi"


def engine_online(rs):
    env = _container(_find(rs, "Deployment", "llama-70b"), "vllm")["env"]
    next(e for e in env if e["name"] == "HF_HUB_OFFLINE")["value"] = "0"


def runtime_lora_updating(rs):
    env = _container(_find(rs, "Deployment", "qwen-7b"), "vllm")["env"]
    next(e for e in env if e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING")["value"] = "true"


def init_container_fetches(rs):
    # How engines fetched before the model cache: an init container at every start.
    pod_spec(_find(rs, "Deployment", "mistral-7b"))["initContainers"] = [
        {"name": "fetch", "image": "rclone/rclone:1.75.1", "command": ["sh", "/fetch/fetch.sh"]}]


def weights_on_pod_volume(rs):
    volumes = pod_spec(_find(rs, "Deployment", "llama-3b"))["volumes"]
    volumes[:] = [{"name": "weights", "emptyDir": {}} if v["name"] == "weights" else v for v in volumes]


def weights_claim_writable(rs):
    mounts = _container(_find(rs, "Deployment", "llama-3b"), "vllm")["volumeMounts"]
    next(m for m in mounts if m["name"] == "weights")["readOnly"] = False


def engine_not_waiting_for_its_cache(rs):
    deployment = _find(rs, "Deployment", "llama-70b")
    rs[rs.index(deployment)] = dataclasses.replace(deployment, dependencies=())


def taint_a_node_by_patch(rs):
    # What GpuNodes rendered before taints were left to the node's registration.
    _find(rs, "NodePatch", "h100-mig-0").props["spec"] = {
        "taints": [{"key": "tenantry.io/pool", "value": "h100-mig", "effect": "NoSchedule"}]}


def autoscaler_before_its_metrics_api(rs):
    hpa = _find(rs, "HorizontalPodAutoscaler", "tenantry-gateway")
    rs[rs.index(hpa)] = dataclasses.replace(hpa, dependencies=())


FAULTS: list[tuple[Callable, str, str]] = [
    (drop_quota, "tenant_namespaces_are_isolated", "tenant-partner-api has no ResourceQuota"),
    (drop_limit_range, "tenant_namespaces_are_isolated", "tenant-assistant has no LimitRange"),
    (weaken_default_deny, "tenant_namespaces_are_isolated", "tenant-assistant has no default-deny"),
    (let_a_tenant_in, "tenant_namespaces_are_isolated",
     "NetworkPolicy tenant-assistant/tenantry-isolation lets traffic into a tenant namespace"),
    (let_a_tenant_reach_an_engine, "tenant_namespaces_are_isolated",
     "NetworkPolicy tenant-assistant/extra lets a tenant out to"),
    (open_engine_to_a_tenant, "engines_reachable_only_from_gateway", "reachable from"),
    (open_engine_to_everyone, "engines_reachable_only_from_gateway", "reachable from anywhere"),
    (expose_engine, "engines_reachable_only_from_gateway", "exposed outside the cluster"),
    (drop_engine_policy, "engines_reachable_only_from_gateway", "has no NetworkPolicy guarding"),
    (expose_engine, "nothing_is_public", "Service tenantry/qwen-7b is of type LoadBalancer"),
    (open_the_gateway_by_node_port, "nothing_is_public", "Service tenantry/tenantry-gateway is of type NodePort"),
    (drop_limits, "containers_have_requests_and_limits", "tenantry-redis container redis has no limits"),
    (unpinned_image, "versions_are_pinned", "does not pin"),
    (malformed_image_digest, "versions_are_pinned", "has a malformed digest 'sha256:0123abcd'"),
    (other_chart_version, "versions_are_pinned", "is not chart gpu-operator v26.3.3"),
    (secret_in_config_map, "no_secret_in_plain_text", "ConfigMap tenantry/tenantry-gateway holds a secret"),
    (secret_as_env_literal, "no_secret_in_plain_text", "LITELLM_MASTER_KEY as a literal"),
    (tp_on_mig, "tensor_parallel_never_on_mig", "qwen-7b runs tensor parallel 2 on MIG"),
    (gpus_not_matching_tp, "tensor_parallel_never_on_mig", "requests 2 GPUs for tensor parallel 4"),
    (args_not_from_plan, "engines_match_the_plan", "mistral-7b runs vLLM with"),
    (engine_started_by_module_path, "engines_match_the_plan", "mistral-7b starts vLLM with ['python3', '-m'"),
    (replicas_not_from_plan, "engines_match_the_plan", "llama-3b has 3 replicas, the plan says 8"),
    (taint_a_node_by_patch, "node_patches_leave_taints_alone", "NodePatch h100-mig-0 sets spec.taints"),
    (gateway_scales_down_in_an_hour_long_period, "autoscaler_behaviour_in_range",
     "HorizontalPodAutoscaler tenantry/tenantry-gateway scaleDown policy periodSeconds is 3600: the API server accepts "
     "1 to 1800"),
    (autoscaler_before_its_metrics_api, "autoscalers_have_a_metrics_api",
     "HorizontalPodAutoscaler tenantry/tenantry-gateway scales on resource metrics but does not depend"),
    (model_volume_sized_from_fp8_weights, "engine_volumes_hold_their_checkpoint",
     "llama-70b reads 131.4 GiB of bf16 llama-3.1-70b weights from /models, whose volume holds 80896Mi"),
    (engine_online, "engines_fetch_nothing_at_start", "llama-70b container vllm runs without HF_HUB_OFFLINE=1"),
    (runtime_lora_updating, "engines_fetch_nothing_at_start",
     "qwen-7b container vllm allows loading LoRA adapters at run time"),
    (init_container_fetches, "engines_fetch_nothing_at_start", "mistral-7b runs init container fetch before vLLM"),
    (weights_on_pod_volume, "engines_fetch_nothing_at_start", "llama-3b does not mount /models from a cache claim"),
    (weights_claim_writable, "engines_fetch_nothing_at_start", "at /models writable"),
    (engine_not_waiting_for_its_cache, "engines_fetch_nothing_at_start", "which no Job it waits for fills"),
]


def _run(rule: str, resources: list[Resource], plan) -> list[str]:
    check = next(getattr(m, rule) for m in (rules, engine_policies, crd_policies, cluster_policies)
                 if hasattr(m, rule))
    if rule == "engines_reachable_only_from_gateway":
        return check(resources, GATEWAY_SELECTOR, MONITORING)
    if rule == "tenant_namespaces_are_isolated":
        return check(resources, GATEWAY_SELECTOR, GATEWAY_PORT)
    if "plan" in inspect.signature(check).parameters:
        return check(resources, plan)
    return check(resources)


@pytest.mark.parametrize(("fault", "rule", "words"), FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_each_policy_catches_its_fault(clean, fault, rule, words):
    plan, resources = clean
    assert _run(rule, resources, plan) == []
    broken = copy.deepcopy(resources)
    fault(broken)
    violations = _run(rule, broken, plan)
    assert any(words in v for v in violations), violations


def test_policy_pack_sees_secrets_behind_pulumi_policys_proxies():
    from pulumi_policy.deserialize import deserialize_properties

    wire = {"data": {"a": "plain", "b": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                                         "value": "sk-123"}}}
    props = deserialize_properties(wire, proxy_secrets=True)
    assert props["data"]["b"] == "sk-123"  # what a naive policy would see
    plain = from_policy_props(props)
    assert plain == {"data": {"a": "plain", "b": Secret("sk-123")}}
    assert rules.no_secret_in_plain_text([Resource("kubernetes:core/v1:ConfigMap", "c", plain)])


def test_policy_pack_program_compiles_and_lists_every_rule():
    """The pack runs every rule `tenantry manifests` runs (checks.py), each under its own name."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pack = ast.parse((root / "policy" / "__main__.py").read_text())
    checks = ast.parse((root / "tenantry" / "manifests" / "checks.py").read_text())

    def rules_called(tree: ast.AST) -> set[str]:
        return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name) and node.value.id.endswith(("policies", "rules"))}

    names = [node.args[0].value for node in ast.walk(pack)
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_stack_rule"]
    assert len(names) == len(set(names)), names
    assert rules_called(checks) - {"Resource"} <= rules_called(pack), "a rule checks.py runs is missing from the pack"
