"""Helm values against the chart's own values.schema.json where the pinned release ships one
(tenantry/manifests/chart_values.py): what Helm would refuse at install is refused at render, with the
release and the value's path."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import pytest

from tenantry.manifests.chart_values import SCHEMA_FILE, chart_values_problems
from tenantry.pins import CHARTS_DIR
from tenantry.stacks import stack_path
from tests.manifests.tampering import shared_render

STACK = "h100-mig-mixed"  # PostgreSQL with backups: the operator, the plugin and cert-manager


@pytest.fixture(scope="module")
def releases():
    return shared_render(STACK).releases()


def _with_values(releases, chart: str, change) -> list:
    out = []
    for release in releases:
        if release.inputs.get("chart") == chart:
            inputs = copy.deepcopy(release.inputs)
            change(inputs["values"])
            release = replace(release, inputs=inputs)
        out.append(release)
    return out


def test_each_schema_names_the_commit_it_was_taken_from_and_requires_nothing():
    """The charts that ship a schema at their pinned tag; the others (lws 0.10.0, keda 2.20.2, istio 1.30.3,
    gpu-operator, kube-prometheus-stack, metrics-server) ship none. No required key: the check validates
    tenantry's values, not Helm's coalesced ones (chart_values.py)."""
    folders = sorted(p.parent.name for p in CHARTS_DIR.glob(f"*/{SCHEMA_FILE}"))
    assert folders == ["cert-manager", "cloudnative-pg", "plugin-barman-cloud"]
    for folder in folders:
        pin_text = (CHARTS_DIR / folder / "chart.yaml").read_text(encoding="utf-8")
        assert re.search(r"values\.schema\.json[\s\S]*commit[\s#]+[0-9a-f]{40}", pin_text), folder
        assert '"required": [' not in json.dumps(json.loads((CHARTS_DIR / folder / SCHEMA_FILE).read_text())) \
            .replace('"required": []', ""), folder


def test_the_rendered_values_meet_their_charts_schemas(releases):
    assert {r.inputs["chart"] for r in releases} >= {"cert-manager", "cloudnative-pg", "plugin-barman-cloud"}
    assert chart_values_problems(releases) == []


def test_an_unknown_value_is_refused_with_its_release_and_path(releases):
    """cert-manager's schema refuses keys it does not define: a misspelt `crds` would otherwise install no CRDs."""
    broken = _with_values(releases, "cert-manager", lambda values: values.update({"crd": {"enabled": True}}))
    problems = chart_values_problems(broken)
    assert len(problems) == 1 and problems[0].startswith("Release cert-manager (cert-manager v1.21.1): values.")
    assert "'crd' was unexpected" in problems[0], problems


def test_a_value_of_the_wrong_type_is_refused(releases):
    broken = _with_values(releases, "cloudnative-pg", lambda values: values.update({"replicaCount": "two"}))
    problems = chart_values_problems(broken)
    assert problems == ["Release cloudnative-pg (cloudnative-pg 0.29.0): values.replicaCount: 'two' is not of type "
                        "'integer'"], problems
