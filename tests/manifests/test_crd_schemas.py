"""Every custom resource tenantry renders against the CRD of the release its chart pins (charts/<chart>/crds,
each file naming its source), strictly: an unknown field, a wrong type or a missing required field is refused
with its path, as the API server's strict field validation would refuse it (tenantry/manifests/crd_schemas.py)."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from tenantry.manifests.crd_schemas import pinned_crd_schemas
from tenantry.manifests.validate import validate_manifests
from tenantry.deploy.kv_routing import applied_crds
from tenantry.pins import APPLIED_CRDS_DIR, CHARTS_DIR, chart
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

STACK = "h100-isolation"  # PostgreSQL with backups: every kind of custom resource but KEDA's (test_autoscaling.py)
KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Cluster", "ScheduledBackup", "ObjectStore"}


@pytest.fixture(scope="module")
def stack():
    return plan_stack(STACK), shared_render(STACK).manifests()


def test_each_pinned_crd_names_the_release_it_was_taken_from():
    files = sorted(CHARTS_DIR.glob("*/crds/*.yaml"))
    assert {f.parent.parent.name for f in files} == {"keda", "kube-prometheus-stack", "cloudnative-pg",
                                                     "plugin-barman-cloud", "lws", "istio-base"}
    for path in files:
        text = path.read_text(encoding="utf-8")
        pin = chart(path.parent.parent.name)
        assert re.search(r"at commit [0-9a-f]{40}", text) and pin.version.lstrip("v") in text.split("\n---")[0], path
        crd = yaml.safe_load(text)
        assert path.stem == crd["metadata"]["name"], path  # <plural>.<group>, as the API server names it


def test_each_crd_tenantry_applies_names_its_source_and_is_the_one_applied():
    """crds/<project>/: CRDs no pinned chart installs. Each names the commit it was taken from, and is what the
    kv-aware stack applies, unchanged."""
    files = sorted(APPLIED_CRDS_DIR.glob("*/*.yaml"))
    assert {f"{f.parent.name}/{f.stem}" for f in files} == {
        "gateway-api/gatewayclasses.gateway.networking.k8s.io", "gateway-api/gateways.gateway.networking.k8s.io",
        "gateway-api/httproutes.gateway.networking.k8s.io",
        "inference-extension/inferencepools.inference.networking.k8s.io",
        "llm-d-router/inferenceobjectives.llm-d.ai"}
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert re.search(r"at commit [0-9a-f]{40} \(tag v\d+\.\d+\.\d+, \d{4}-\d\d-\d\d\)", text), path
        assert path.stem == yaml.safe_load(text)["metadata"]["name"], path
    assert [c["metadata"]["name"] for c in applied_crds()] == [f.stem for f in files]


def test_every_custom_resource_rendered_has_a_pinned_crd_and_meets_it(stack):
    plan, manifests = stack
    custom = [m for m in manifests if "." in m["apiVersion"].split("/")[0] and not m["apiVersion"].endswith(
        (".k8s.io/v1", ".k8s.io/v2")) and m["apiVersion"] != "apps/v1"]
    assert {m["kind"] for m in custom} >= KINDS
    assert all((m["apiVersion"], m["kind"]) in pinned_crd_schemas() for m in custom), {m["kind"] for m in custom}
    assert validate_manifests(custom, plan.kubernetes_version) == []


@pytest.mark.parametrize(("kind", "change", "says"), [
    ("ServiceMonitor", lambda spec: spec["endpoints"][0].update(port=9400),
     "spec.endpoints.0.port: 9400 is not of type 'string'"),
    ("PodMonitor", lambda spec: spec.update(podMetricsEndpoints={}),
     "spec.podMetricsEndpoints: {} is not of type 'array'"),
    ("PrometheusRule", lambda spec: spec["groups"][0].update(rules="all"),
     "spec.groups.0.rules: 'all' is not of type 'array'"),
    ("Cluster", lambda spec: spec.update(instances="three"), "spec.instances: 'three' is not of type 'integer'"),
    ("Cluster", lambda spec: spec.update(replicas=3), "spec: Additional properties are not allowed ('replicas'"),
    ("ScheduledBackup", lambda spec: spec.pop("schedule"), "spec: 'schedule' is a required property"),
    ("ObjectStore", lambda spec: spec["configuration"].update(bucket="x"),
     "spec.configuration: Additional properties are not allowed ('bucket'"),
])
def test_the_pinned_crds_refuse_what_the_api_server_would(stack, kind, change, says):
    plan, manifests = stack
    obj = copy.deepcopy(next(m for m in manifests if m["kind"] == kind))
    change(obj["spec"])
    problems = validate_manifests([obj], plan.kubernetes_version)
    assert any(says in p for p in problems), problems
