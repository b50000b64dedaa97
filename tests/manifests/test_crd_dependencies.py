"""Every custom resource is created after the Helm release that installs its
CRD: the rendering records each resource's dependencies and parent, and the
policy walks that graph (on a fresh cluster a ServiceMonitor created before
kube-prometheus-stack fails with "no matches for kind ServiceMonitor")."""

from __future__ import annotations

import dataclasses

import pytest

from tenantry.manifests import crd_policies as rules
from tenantry.manifests.resources import Resource
from tenantry.manifests.checks import policy_resources
from tenantry.stacks import stack_path
from tests.manifests.test_render import STACKS
from tests.manifests.tampering import shared_render

STACK = "urn:pulumi:s::tenantry::pulumi:pulumi:Stack::tenantry-s"


def _urn(type_: str, name: str) -> str:
    return f"urn:pulumi:s::tenantry::{type_}::{name}"


RELEASE = Resource("kubernetes:helm.sh/v3:Release", "stack", {"chart": "kube-prometheus-stack"},
                         _urn("kubernetes:helm.sh/v3:Release", "stack"))
ENGINE = Resource("tenantry:engine:Engine", "engine", {}, _urn("tenantry:engine:Engine", "engine"), STACK)


def _monitor(**graph) -> Resource:
    return Resource("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "monitor",
                          {"metadata": {"name": "qwen-7b", "namespace": "tenantry"}},
                          _urn("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "monitor"), **graph)


def test_a_service_monitor_with_no_dependency_is_reported():
    violations = rules.custom_resources_wait_for_their_crds([RELEASE, ENGINE, _monitor(parent=ENGINE.urn)])
    assert violations == ["ServiceMonitor tenantry/qwen-7b does not depend on the Helm release of "
                          "kube-prometheus-stack, which installs its CRD"]


@pytest.mark.parametrize("graph", [
    {"dependencies": (RELEASE.urn,)},
    # Through its component: Pulumi registers the child once the component has registered, after its dependencies.
    {"parent": "engine-with-dependency"},
], ids=["direct", "through-parent"])
def test_a_service_monitor_after_the_release_passes(graph):
    engine = dataclasses.replace(ENGINE, urn="engine-with-dependency", dependencies=(RELEASE.urn,))
    assert rules.custom_resources_wait_for_their_crds([RELEASE, engine, _monitor(**graph)]) == []


def test_a_release_of_another_chart_does_not_count():
    other = dataclasses.replace(RELEASE, props={"chart": "cloudnative-pg"})
    assert rules.custom_resources_wait_for_their_crds([other, _monitor(dependencies=(other.urn,))])


def test_a_custom_resource_no_pinned_chart_defines_is_reported():
    route = Resource("kubernetes:gateway.x-k8s.io/v1alpha1:XBackendTrafficPolicy", "p", {"metadata": {"name": "p"}}, "u")
    assert rules.custom_resources_wait_for_their_crds([route]) == [
        "XBackendTrafficPolicy p is a gateway.x-k8s.io custom resource that no pinned chart is known to define"]


def test_a_route_waits_for_the_crd_tenantry_applies_of_its_own_kind():
    """Gateway API's CRDs come from no chart: tenantry applies them, and a route must wait for its kind's."""
    route = Resource("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "route", {"metadata": {"name": "r"}}, "u")
    def crd(kind):
        return Resource("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", f"crd-{kind}",
                        {"metadata": {"name": kind}, "spec": {"group": "gateway.networking.k8s.io",
                                                               "names": {"kind": kind}}}, f"crd-{kind}")
    assert rules.custom_resources_wait_for_their_crds([route]) == [
        "HTTPRoute r does not depend on the HTTPRoute CRD tenantry applies (crds/)"]
    gateway_only = dataclasses.replace(route, dependencies=("crd-Gateway",))
    assert rules.custom_resources_wait_for_their_crds([crd("Gateway"), gateway_only]) == [
        "HTTPRoute r does not depend on the HTTPRoute CRD tenantry applies (crds/)"]
    after = dataclasses.replace(route, dependencies=("crd-HTTPRoute",))
    assert rules.custom_resources_wait_for_their_crds([crd("HTTPRoute"), after]) == []


def test_an_object_store_waits_for_the_barman_cloud_plugin():
    plugin = dataclasses.replace(RELEASE, props={"chart": "plugin-barman-cloud"}, urn="plugin")
    store = Resource("kubernetes:barmancloud.cnpg.io/v1:ObjectStore", "store", {"metadata": {"name": "s"}}, "u")
    assert rules.custom_resources_wait_for_their_crds([store]) == [
        "ObjectStore s does not depend on the Helm release of plugin-barman-cloud, which installs its CRD"]
    assert rules.custom_resources_wait_for_their_crds([plugin, dataclasses.replace(store, dependencies=("plugin",))]) == []


def test_built_in_kinds_and_components_need_no_release():
    built_in = [Resource(t, "x", {}, f"u{i}") for i, t in enumerate((
        "kubernetes:core/v1:Service", "kubernetes:apps/v1:Deployment", "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        "kubernetes:helm.sh/v3:Release", "tenantry:engine:Engine", "random:index/randomPassword:RandomPassword"))]
    assert rules.custom_resources_wait_for_their_crds(built_in) == []


@pytest.fixture(scope="module", params=STACKS)
def resources(request):
    return policy_resources(shared_render(request.param))


def test_every_custom_resource_of_every_stack_waits_for_its_crd(resources):
    custom = [r for r in resources if rules._api_group(r) in rules.CRD_CHARTS]
    assert {r.kind for r in custom} >= {"ServiceMonitor", "PodMonitor", "Cluster"}
    assert rules.custom_resources_wait_for_their_crds(resources) == []


def test_the_rendering_records_each_resources_urn_parent_and_dependencies(resources):
    by_urn = {r.urn: r for r in resources}
    assert len(by_urn) == len(resources)
    for resource in resources:
        assert resource.parent is None or resource.parent in by_urn, resource
        assert set(resource.dependencies) <= set(by_urn), resource
    cluster = next(r for r in resources if r.kind == "Cluster")
    backed_up = any(r.kind == "ObjectStore" for r in resources)
    assert {by_urn[d].name for d in cluster.dependencies} == {
        "tenantry-postgres-operator", "tenantry-postgres-owner", *(["tenantry-postgres-object-store"] if backed_up else [])}


def test_dropping_a_monitors_dependency_is_caught(resources):
    broken = [dataclasses.replace(r, dependencies=()) if r.kind == "ServiceMonitor" and r.name == "tenantry-gateway-monitor"
              else r for r in resources]
    assert rules.custom_resources_wait_for_their_crds(broken) == [
        "ServiceMonitor tenantry/tenantry-gateway does not depend on the Helm release of kube-prometheus-stack, "
        "which installs its CRD"]
