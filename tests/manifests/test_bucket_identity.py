"""Bucket readers and writers act as the stack's declared cloud identity
(issue 13 item 4): the service account carries the workload-identity
annotation, fetchers run as it (or carry the static keys), and PostgreSQL's
instance pods archive as it. Each rendered fact, and the policy that fails
when one is missing."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tenantry.deploy.identity import AWS_ROLE_ANNOTATION, BUCKET_SERVICE_ACCOUNT
from tenantry.manifests.bucket_policies import RCLONE_BUCKET_REMOTE, bucket_readers_have_an_identity
from tenantry.manifests.checks import policy_resources
from tenantry.manifests.offline import render
from tenantry.manifests.resources import Resource, containers, pod_spec
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

ROLE = "arn:aws:iam::111122223333:role/tenantry-buckets"


@pytest.fixture(scope="module")
def adapters_in_s3():
    """h200-many-adapters: 200 adapters in S3, backups to S3, an IRSA role."""
    return plan_stack("h200-many-adapters"), policy_resources(shared_render("h200-many-adapters"))


@pytest.fixture(scope="module")
def static_keys(tmp_path_factory):
    """h100x8-shared-70b with its weights in S3 and static keys instead of a role."""
    spec = yaml.safe_load(stack_path("h100x8-shared-70b").read_text(encoding="utf-8"))
    spec["platform"]["cloud_identity"] = {"provider": "static", "credentials_secret": "bucket-keys"}
    engine = spec["engines"][0]
    engine["source"] = "s3://tenantry-models/llama-3.1-70b"
    path = Path(tmp_path_factory.mktemp("static")) / "static-keys.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return plan_stack(path), policy_resources(render(path))


def _bucket_fetchers(resources: list[Resource]) -> list[Resource]:
    config_text = {(r.namespace, r.metadata.get("name")): " ".join(map(str, (r.props.get("data") or {}).values()))
                   for r in resources if r.kind == "ConfigMap"}
    found = []
    for r in resources:
        spec = pod_spec(r)
        if spec is None:
            continue
        mounted = [config_text.get((r.namespace, (v.get("configMap") or {}).get("name")), "")
                   for v in spec.get("volumes") or []]
        commands = [" ".join(map(str, [*(c.get("command") or []), *(c.get("args") or [])])) for c in containers(r)]
        if any(RCLONE_BUCKET_REMOTE.search(t) for t in mounted + commands):
            found.append(r)
    return found


def _cluster(resources: list[Resource]) -> Resource:
    return next(r for r in resources if r.kind == "Cluster")


def test_the_service_account_carries_the_role(adapters_in_s3):
    _, resources = adapters_in_s3
    account = next(r for r in resources if r.kind == "ServiceAccount" and r.metadata["name"] == BUCKET_SERVICE_ACCOUNT)
    assert account.metadata["annotations"] == {AWS_ROLE_ANNOTATION: ROLE}
    assert account.props.get("automountServiceAccountToken") is False


def test_s3_fetchers_run_as_the_bucket_service_account(adapters_in_s3):
    plan, resources = adapters_in_s3
    fetchers = _bucket_fetchers(resources)
    assert fetchers, "h200-many-adapters fetches its adapters from S3: some pod must run rclone against it"
    assert {pod_spec(r).get("serviceAccountName") for r in fetchers} == {BUCKET_SERVICE_ACCOUNT}
    assert bucket_readers_have_an_identity(resources, plan) == []


def test_postgres_archives_as_the_role(adapters_in_s3):
    _, resources = adapters_in_s3
    template = _cluster(resources).props["spec"]["serviceAccountTemplate"]
    assert template["metadata"]["annotations"] == {AWS_ROLE_ANNOTATION: ROLE}


def test_static_keys_reach_every_fetcher_and_the_backups(static_keys):
    plan, resources = static_keys
    assert not any(r.kind == "ServiceAccount" and (r.metadata.get("annotations") or {}) for r in resources)
    fetchers = _bucket_fetchers(resources)
    assert fetchers, "the weights are in S3: some pod must fetch them"
    for fetcher in fetchers:
        rclone = [c for c in containers(fetcher) if "rclone" in str(c.get("image"))]
        assert rclone, fetcher.label
        for container in rclone:
            refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env") or [] if "valueFrom" in e}
            assert refs["AWS_ACCESS_KEY_ID"] == {"name": "bucket-keys", "key": "AWS_ACCESS_KEY_ID"}
            assert refs["AWS_SECRET_ACCESS_KEY"] == {"name": "bucket-keys", "key": "AWS_SECRET_ACCESS_KEY"}
    assert bucket_readers_have_an_identity(resources, plan) == []


def _without(resources: list[Resource], change) -> list[Resource]:
    broken = copy.deepcopy(resources)
    change(broken)
    return broken


def test_policy_refuses_a_fetcher_under_the_default_account(adapters_in_s3):
    plan, resources = adapters_in_s3

    def default_account(rs):
        del pod_spec(_bucket_fetchers(rs)[0])["serviceAccountName"]

    violations = bucket_readers_have_an_identity(_without(resources, default_account), plan)
    assert any("fetches from a bucket as service account default, not tenantry-buckets" in v for v in violations), violations


def test_policy_refuses_an_account_without_the_role(adapters_in_s3):
    plan, resources = adapters_in_s3

    def no_annotation(rs):
        next(r for r in rs if r.kind == "ServiceAccount" and r.metadata["name"] == BUCKET_SERVICE_ACCOUNT).metadata["annotations"] = {}

    violations = bucket_readers_have_an_identity(_without(resources, no_annotation), plan)
    assert any("ServiceAccount tenantry/tenantry-buckets does not carry" in v for v in violations), violations


def test_policy_refuses_postgres_archiving_without_the_role(adapters_in_s3):
    plan, resources = adapters_in_s3

    def no_template(rs):
        del _cluster(rs).props["spec"]["serviceAccountTemplate"]

    violations = bucket_readers_have_an_identity(_without(resources, no_template), plan)
    assert any("tenantry-postgres archives to a bucket, but its serviceAccountTemplate" in v for v in violations), violations


def test_policy_refuses_a_fetcher_without_the_static_keys(static_keys):
    plan, resources = static_keys

    def no_keys(rs):
        for container in containers(_bucket_fetchers(rs)[0]):
            container["env"] = [e for e in container.get("env") or [] if not e["name"].startswith("AWS_")]

    violations = bucket_readers_have_an_identity(_without(resources, no_keys), plan)
    assert any("without the credentials ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY']" in v for v in violations), violations
