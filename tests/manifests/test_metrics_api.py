"""The gateway's autoscaler scales on CPU, which it reads from metrics.k8s.io: it
renders only with a metrics API that is installed (metrics-server, pinned, and
the autoscaler waits for it) or declared present (then no second metrics-server
contends for the APIService v1beta1.metrics.k8s.io)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from tenantry.manifests.checks import policy_resources
from tenantry.manifests.cluster_policies import autoscalers_have_a_metrics_api
from tenantry.manifests.offline import render
from tenantry.manifests.resources import Resource
from tenantry.pins import chart
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.test_render import STACKS
from tests.manifests.tampering import shared_render

PIN = chart("metrics-server")


def _metrics_servers(resources: list[Resource]) -> list[Resource]:
    return [r for r in resources if r.kind == "Release" and r.props.get("chart") == PIN.chart]


def _autoscaler(resources: list[Resource]) -> Resource:
    return next(r for r in resources if r.kind == "HorizontalPodAutoscaler")


@pytest.fixture(scope="module", params=STACKS)
def shipped(request):
    return plan_stack(request.param), policy_resources(shared_render(request.param))


@pytest.fixture(scope="module")
def on_gke(tmp_path_factory):
    """h100x8-shared-70b on GKE, whose clusters serve metrics.k8s.io themselves."""
    spec = yaml.safe_load(stack_path("h100x8-shared-70b").read_text(encoding="utf-8"))
    spec["cluster"]["environment"] = "gke"
    # Its buckets are S3's, read as an AWS role, which only EKS gives: on GKE, with a static identity.
    spec["platform"]["cloud_identity"] = {"provider": "static", "credentials_secret": "bucket-keys"}
    path = Path(tmp_path_factory.mktemp("gke")) / "on-gke.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return plan_stack(path), policy_resources(render(path))


def test_every_shipped_stack_installs_the_metrics_api_its_autoscaler_reads(shipped):
    plan, resources = shipped
    assert plan.cluster.metrics_api == "install"
    [release] = _metrics_servers(resources)
    assert (release.props["version"], release.props["repositoryOpts"]["repo"]) == (PIN.version, PIN.repository)
    assert release.urn in _autoscaler(resources).dependencies
    namespace = next(r for r in resources if r.kind == "Namespace" and r.metadata["name"] == PIN.namespace)
    assert namespace.metadata["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert autoscalers_have_a_metrics_api(resources, plan) == []


def test_metrics_server_skips_verifying_kubelets_only_where_their_certificates_are_self_signed(shipped):
    """On bare-metal (kubeadm's self-signed kubelet certificates) metrics-server cannot verify a kubelet and never
    becomes ready, so `pulumi up` fails its Helm wait: it runs with --kubelet-insecure-tls there, and only there."""
    plan, resources = shipped
    [release] = _metrics_servers(resources)
    args = release.props["values"].get("args", [])
    expected = ["--kubelet-insecure-tls"] if plan.cluster.kubelet_serving_certs == "self-signed" else []
    assert args == expected
    assert plan.cluster.kubelet_serving_certs == ("self-signed" if plan.cluster.environment == "bare-metal"
                                                  else "cluster-ca")


def test_where_the_cluster_serves_the_metrics_api_none_is_installed(on_gke):
    plan, resources = on_gke
    assert plan.cluster.metrics_api == "present"
    assert _metrics_servers(resources) == []
    assert _autoscaler(resources).props["spec"]["metrics"][0]["type"] == "Resource"
    assert autoscalers_have_a_metrics_api(resources, plan) == []


def test_a_second_metrics_server_where_one_is_present_is_refused(on_gke, shipped):
    plan, resources = on_gke
    _, elsewhere = shipped
    extra = _metrics_servers(elsewhere)
    assert autoscalers_have_a_metrics_api([*resources, *extra], plan) == [
        f"Helm release {extra[0].name} installs metrics-server, but cluster.metrics_api says the cluster serves "
        "metrics.k8s.io already: two would contend for the APIService v1beta1.metrics.k8s.io"]


def test_an_autoscaler_created_before_its_metrics_api_is_refused(shipped):
    plan, resources = shipped
    hpa = _autoscaler(resources)
    broken = [dataclasses.replace(r, dependencies=()) if r is hpa else r for r in resources]
    assert autoscalers_have_a_metrics_api(broken, plan) == [
        "HorizontalPodAutoscaler tenantry/tenantry-gateway scales on resource metrics but does not depend on the "
        "Helm release of metrics-server, which serves metrics.k8s.io"]
