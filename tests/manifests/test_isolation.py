"""Each isolation level of stacks/h100-isolation.yaml, proven from the objects the rendering would apply
(tenantry/manifests/isolation_policies.py), and the check shown to catch each way a rendering could
break a promise: a tampered copy of the rendering must fail it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tenantry.configs.node_registration import DEDICATED_LABEL, POOL_LABEL
from tenantry.manifests.checks import policy_resources
from tenantry.manifests.isolation_policies import tenants_get_the_isolation_they_were_promised as promised
from tenantry.manifests.resources import Resource, pod_spec, template_labels
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import changed, shared_render

STACK = "h100-isolation"


@pytest.fixture(scope="module")
def stack():
    return plan_stack(STACK), policy_resources(shared_render(STACK))


def _named(resources: list[Resource], kind: str, name: str) -> Resource:
    return next(r for r in resources if r.kind == kind and r.metadata.get("name") == name)


def _teams(resources: list[Resource]) -> dict[str, list[str]]:
    teams = json.loads(_named(resources, "ConfigMap", "tenantry-reconciler").props["data"]["teams.json"])
    return {t["team_alias"]: t["models"] for t in teams}


def _api_base(resources: list[Resource]) -> dict[str, str]:
    config = yaml.safe_load(_named(resources, "ConfigMap", "tenantry-gateway").props["data"]["config.yaml"])
    return {m["model_name"]: m["litellm_params"]["api_base"] for m in config["model_list"]}


def test_the_shipped_stack_keeps_every_promise(stack):
    plan, resources = stack
    assert {t.name: t.isolation for t in plan.tenants} == {
        "chat-app": "shared", "legal-co": "adapter", "bank": "mig", "acme": "dedicated-replica",
        "partner": "dedicated-node"}
    assert {e.name: (e.dedicated_to, e.dedicated_nodes) for e in plan.engines} == {
        "llama-8b": (None, False), "qwen-7b": ("acme", False), "mistral-7b": ("bank", False),
        "llama-70b": ("partner", True)}
    assert {p.name: p.dedicated_to for p in plan.pools} == {"shared": None, "mig": None, "partner": "partner"}
    assert promised(resources, plan) == []


def test_shared_tenants_are_co_batched_on_one_engine_with_their_own_salts(stack):
    plan, resources = stack
    teams, api_base = _teams(resources), _api_base(resources)
    on_llama_8b = sorted(t for t, models in teams.items() if any("llama-8b." in api_base[m] for m in models))
    assert on_llama_8b == ["chat-app", "legal-co"]
    assert len({plan.tenant(t).cache_salt for t in on_llama_8b}) == 2


def test_an_adapter_tenant_may_call_its_own_adapters_and_nothing_else(stack):
    plan, resources = stack
    assert sorted(_teams(resources)["legal-co"]) == ["legal-contracts", "legal-redline"]
    tampered = changed(resources, "ConfigMap", "tenantry-reconciler", lambda props: props["data"].update(
        {"teams.json": json.dumps([{**t, "models": [*t["models"], "llama-8b"]} if t["team_alias"] == "legal-co"
                                   else t for t in json.loads(props["data"]["teams.json"])])}))
    assert promised(tampered, plan) == [
        "tenant legal-co (isolation adapter) may call llama-8b, which is not one of its adapters"]


def test_a_mig_tenants_engine_runs_on_slices_no_other_tenant_reaches(stack):
    plan, resources = stack
    pod = pod_spec(_named(resources, "Deployment", "mistral-7b"))
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert [t for t, models in _teams(resources).items() if "mistral-7b" in models] == ["bank"]

    def whole_gpu(props: dict[str, Any]) -> None:
        limits = props["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        limits["nvidia.com/gpu"] = limits.pop("nvidia.com/mig-3g.40gb")

    assert promised(changed(resources, "Deployment", "mistral-7b", whole_gpu), plan) == [
        "Deployment tenantry/mistral-7b of tenant bank (isolation mig) requests ['nvidia.com/gpu'], not a MIG slice"]


def test_a_dedicated_replica_serves_its_tenant_alone(stack):
    plan, resources = stack
    assert template_labels(_named(resources, "Deployment", "qwen-7b"))["tenantry.io/dedicated-to"] == "acme"
    assert [t for t, models in _teams(resources).items() if "qwen-7b" in models] == ["acme"]
    # Another tenant's route to it, as a fallback would add: its team must be allowed the target.
    tampered = changed(resources, "ConfigMap", "tenantry-reconciler", lambda props: props["data"].update(
        {"teams.json": json.dumps([{**t, "models": [*t["models"], "qwen-7b"]} if t["team_alias"] == "chat-app"
                                   else t for t in json.loads(props["data"]["teams.json"])])}))
    assert promised(tampered, plan) == ["engine qwen-7b of tenant acme (isolation dedicated-replica) is reached by "
                                        "chat-app too"]
    unlabelled = changed(resources, "Deployment", "qwen-7b",
                          lambda props: props["spec"]["template"]["metadata"]["labels"].pop("tenantry.io/dedicated-to"))
    assert promised(unlabelled, plan) == ["Deployment tenantry/qwen-7b serves tenant acme alone but its pods are not "
                                          "labelled tenantry.io/dedicated-to=acme"]


def test_a_dedicated_node_runs_its_tenants_engine_and_nothing_else_tolerates_it(stack):
    plan, resources = stack
    pod = pod_spec(_named(resources, "Deployment", "llama-70b"))
    assert pod["nodeSelector"] == {POOL_LABEL: "partner", DEDICATED_LABEL: "partner"}
    node = next(r for r in resources if r.kind == "NodePatch" and r.metadata["name"] == "h100-partner-0")
    assert node.metadata["labels"][DEDICATED_LABEL] == "partner"
    # The engine and the Job that fills its weights cache, both bound to the partner's nodes.
    tolerating = {r.label: pod_spec(r)["nodeSelector"].get(DEDICATED_LABEL) for r in resources
                  if any(t.get("key") == "tenantry.io/pool" and t.get("value") == "partner"
                         for t in (pod_spec(r) or {}).get("tolerations") or [])}
    assert [label.rsplit("-", 1)[0] for label in sorted(tolerating)] == [
        "Deployment tenantry/llama", "Job tenantry/llama-70b-weights"]  # the Job's name ends in its content's hash
    assert set(tolerating.values()) == {"partner"}

    def tolerate_partner(props: dict[str, Any]) -> None:
        props["spec"]["template"]["spec"]["tolerations"].append(
            {"key": "tenantry.io/pool", "operator": "Equal", "value": "partner", "effect": "NoSchedule"})

    assert promised(changed(resources, "Deployment", "llama-8b", tolerate_partner), plan) == [
        "Deployment tenantry/llama-8b tolerates pool partner, dedicated to tenant partner, without selecting its "
        "nodes (node-restriction.kubernetes.io/tenantry-dedicated-to=partner)"]
    unlabelled = changed(resources, "NodePatch", "h100-partner-0",
                          lambda props: props["metadata"]["labels"].pop(DEDICATED_LABEL))
    assert promised(unlabelled, plan) == ["node h100-partner-0 of pool partner is not labelled "
                                          "node-restriction.kubernetes.io/tenantry-dedicated-to=partner"]
