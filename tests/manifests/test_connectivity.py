"""The connectivity table can fail, and fails where it should: each flow is decided by network-config-analyzer
against the rendered NetworkPolicies (tenantry/manifests/connectivity.py), so the policies as they were before
issue 34 (a multi-node engine's stages unable to reach each other, DNS only through kube-dns's pods) and a tenant
namespace opened by mistake are caught, each by the flow it breaks and no other."""

from __future__ import annotations

import copy

import pytest

from tenantry.manifests.connectivity import Flow, analyse, flows, problems
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

STACK = "h100x16-405b"


@pytest.fixture(scope="module")
def stack():
    plan = plan_stack(STACK)
    manifests = shared_render(STACK).manifests()
    return plan, manifests, flows(plan, manifests)


def _changed(manifests: list[dict], name: str, change) -> list[dict]:
    out = copy.deepcopy(manifests)
    change(next(m for m in out if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == name)["spec"])
    return out


def _failing(plan, manifests, table: list[Flow]) -> list[str]:
    return sorted(v.flow.name for v in analyse(plan, manifests, table) if not v.holds)


def test_the_policies_before_issue_34_fail_the_table_exactly_where_they_were_wrong(stack):
    plan, manifests, table = stack
    # Before: the stages admitted each other in but the engines' egress policy (DNS only) let nobody out.
    ingress_only = _changed(manifests, "llama-405b-stages",
                            lambda spec: (spec.pop("egress"), spec.update(policyTypes=["Ingress"])))

    # Before: DNS was kube-dns's pods only; under NodeLocal DNSCache pods ask 169.254.20.10.
    def kube_dns_only(spec):
        for rule in spec["egress"]:
            rule["to"] = [peer for peer in rule.get("to", []) if "ipBlock" not in peer] or rule.pop("to", None)
    old = copy.deepcopy(ingress_only)
    for name in ("tenantry-engines-egress", "tenantry-model-cache-egress"):
        old = _changed(old, name, kube_dns_only)
    for tenant in plan.tenants:
        old = [m if not (m["kind"] == "NetworkPolicy" and m["metadata"]["namespace"] == tenant.namespace)
               else _changed([m], m["metadata"]["name"], kube_dns_only)[0] for m in old]
    assert _failing(plan, old, table) == sorted(
        ["llama-405b -> llama-405b (every port)", "llama-405b -> nodelocal-dns (53/UDP,53/TCP)",
         "fetch-jobs -> nodelocal-dns (53/UDP,53/TCP)",
         *(f"tenant {t.name} -> nodelocal-dns (53/UDP,53/TCP)" for t in plan.tenants)])
    assert any("llama-405b -> llama-405b (every port) (the stages of a replica across nodes" in p
               and "deny it" in p for p in problems(analyse(plan, ingress_only, [
                   f for f in table if f.name == "llama-405b -> llama-405b (every port)"])))


def test_a_tenant_namespace_opened_by_mistake_is_caught_by_the_flows_it_breaks(stack):
    plan, manifests, table = stack
    tenant = plan.tenants[0]
    isolation = next(m for m in manifests if m["kind"] == "NetworkPolicy"
                     and m["metadata"]["namespace"] == tenant.namespace)
    opened = _changed([isolation], isolation["metadata"]["name"],
                      lambda spec: spec.update(egress=[{}], ingress=[{}]))[0]
    wide_open = [opened if m is isolation else m for m in manifests]
    forbidden = [f for f in table if not f.must_pass]
    assert _failing(plan, wide_open, forbidden) == [f"every tenant -> tenant {tenant.name} (every port)"]
    # The engines' and the database's own ingress policies still keep the opened tenant out: defence in depth,
    # which the table shows by those flows holding.
    assert _failing(plan, manifests, forbidden) == []
