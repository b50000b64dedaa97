"""A new pin upgrades the CRDs of its chart (issue 34, item 14): Helm installs a chart's crds/ on the first install
and never again, so LeaderWorkerSet's CRDs are applied by Pulumi from the pinned release's files (the release
skips them), and kube-prometheus-stack runs its own CRD upgrade Job, with images from the pins."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tenantry.manifests.crd_policies import chart_crds_are_upgraded
from tenantry.pins import IMAGES, chart, supported_kubernetes
from tests.manifests.tampering import planned_rendering


@pytest.fixture(scope="module")
def across_nodes():
    """h100x16-405b: an engine across nodes, so the LWS controller is installed."""
    return planned_rendering("h100x16-405b")


def _release(resources, chart_name: str):
    return next(r for r in resources if r.kind == "Release" and str(r.props.get("chart")).endswith(chart_name))


def _with_release(resources, chart_name: str, change):
    target = _release(resources, chart_name)
    props = copy.deepcopy(target.props)
    change(props)
    return [dataclasses.replace(r, props=props) if r is target else r for r in resources]


def test_lws_crds_are_applied_by_pulumi_from_the_pinned_release_and_the_release_waits_for_them(across_nodes):
    _, _, resources = across_nodes
    assert chart_crds_are_upgraded(resources) == []
    release = _release(resources, "lws")
    assert release.props["skipCrds"] is True
    crds = {r.metadata["name"]: r for r in resources if r.kind == "CustomResourceDefinition"}
    shipped = chart("lws").crds()
    assert {c["metadata"]["name"] for c in shipped} == {
        "leaderworkersets.leaderworkerset.x-k8s.io", "disaggregatedsets.disaggregatedset.x-k8s.io",
        "disaggregatedsetrolescalers.disaggregatedset.x-k8s.io"}
    for crd in shipped:
        applied = crds[crd["metadata"]["name"]]
        assert applied.props["spec"] == crd["spec"]  # exactly as the release ships it
        assert applied.urn in release.dependencies
        # A cluster where Helm installed them first hands them over instead of failing on the conflict.
        assert applied.metadata["annotations"]["pulumi.com/patchForce"] == "true"


def test_kube_prometheus_stack_runs_its_crd_upgrade_job_with_pinned_images(across_nodes):
    _, _, resources = across_nodes
    job = _release(resources, "kube-prometheus-stack").props["values"]["crds"]["upgradeJob"]
    assert job["enabled"] is True and job["forceConflicts"] is True
    images = {name: f"{v['registry']}/{v['repository']}:{v['tag']}" for name, v in job["image"].items()}
    assert images == {"busybox": IMAGES["busybox"], "kubectl": IMAGES["kubectl"]}
    # kubectl supports one minor of skew either way: it must reach every Kubernetes the pins support.
    kubectl_minor = int(IMAGES["kubectl"].rsplit(":v", 1)[1].split(".")[1])
    oldest, newest = (int(v.split(".")[1]) for v in supported_kubernetes())
    assert kubectl_minor - 1 <= oldest and newest <= kubectl_minor + 1


def test_as_rendered_before_the_crds_were_left_to_helm_and_the_policy_says_so(across_nodes):
    _, _, resources = across_nodes
    helm_installs = _with_release(resources, "lws", lambda props: props.update(skipCrds=False))
    assert any("installs chart lws's CRDs itself (skipCrds is not true)" in f
               for f in chart_crds_are_upgraded(helm_installs))
    unapplied = [r for r in resources
                 if not (r.kind == "CustomResourceDefinition" and r.metadata["name"].endswith("disaggregatedset.x-k8s.io"))]
    assert sum("of the pinned chart is not applied" in f for f in chart_crds_are_upgraded(unapplied)) == 2
    no_job = _with_release(resources, "kube-prometheus-stack", lambda props: props["values"].pop("crds"))
    assert any("crds.upgradeJob.enabled is None: chart kube-prometheus-stack's CRDs would never be upgraded" in f
               for f in chart_crds_are_upgraded(no_job))
    hook_off = _with_release(resources, "gpu-operator",
                             lambda props: props["values"].setdefault("operator", {}).update(upgradeCRD=False))
    assert any("operator.upgradeCRD is False" in f for f in chart_crds_are_upgraded(hook_off))
