"""`pulumi up` waits for what the platform needs before its dependants start (issue 34, item 8): pulumi-kubernetes
creates a custom resource without waiting unless pulumi.com/waitFor names its ready condition, so the PostgreSQL
Cluster, a LeaderWorkerSet and an engine's Gateway each name theirs, with a timeout that fits a fresh cluster's first
image pulls, and LiteLLM's Deployment waits for the database and the Gateways it calls."""

from __future__ import annotations

import dataclasses

import pytest

from tenantry.manifests.crd_policies import custom_resources_are_awaited
from tests.manifests.tampering import changed, planned_rendering


@pytest.fixture(scope="module", params=["h200-many-adapters", "h100x16-405b"])
def stack(request):
    return planned_rendering(request.param)


def _annotations(resources, kind: str) -> dict[str, str]:
    return next(r for r in resources if r.kind == kind and r.type.startswith("kubernetes:")).metadata["annotations"]


def test_the_database_the_groups_and_the_gateways_are_awaited_and_litellm_waits_for_what_it_calls(stack):
    plan, _, resources = stack
    assert custom_resources_are_awaited(resources) == []
    assert _annotations(resources, "Cluster")["pulumi.com/waitFor"] == "condition=Ready"
    assert int(_annotations(resources, "Cluster")["pulumi.com/timeoutSeconds"]) >= 1200
    gateway = next(r for r in resources if r.kind == "Deployment" and r.metadata["name"] == "tenantry-gateway")
    assert int(gateway.metadata["annotations"]["pulumi.com/timeoutSeconds"]) >= 1200
    needed = [r for r in resources if r.kind in ("Cluster", "Gateway") and r.type.startswith("kubernetes:")]
    assert needed and all(r.urn in gateway.dependencies for r in needed)
    if any(e.pipeline_parallel > 1 for e in plan.engines):
        group = _annotations(resources, "LeaderWorkerSet")
        assert group["pulumi.com/waitFor"] == "condition=Available"
        assert int(group["pulumi.com/timeoutSeconds"]) > max(e.pod.startup_seconds for e in plan.engines)
    if any(e.routing for e in plan.engines):
        assert _annotations(resources, "Gateway")["pulumi.com/waitFor"] == "condition=Programmed"


def test_as_rendered_before_nothing_was_awaited_and_the_policy_says_so(stack):
    _, _, resources = stack

    def unawaited(props):
        props["metadata"]["annotations"] = {k: v for k, v in props["metadata"]["annotations"].items()
                                            if k != "pulumi.com/waitFor"}

    database = next(r for r in resources if r.kind == "Cluster")
    found = custom_resources_are_awaited(changed(resources, "Cluster", database.metadata["name"], unawaited))
    assert found == [f"Cluster tenantry/tenantry-postgres: pulumi up does not wait for it (pulumi.com/waitFor is None, "
                     "not 'condition=Ready')"]
    gateway = next(r for r in resources if r.kind == "Deployment" and r.metadata["name"] == "tenantry-gateway")
    eager = [dataclasses.replace(r, dependencies=()) if r is gateway else r for r in resources]
    assert f"Deployment tenantry/tenantry-gateway does not wait for Cluster tenantry/tenantry-postgres, which it needs " \
           f"at start" in custom_resources_are_awaited(eager)
