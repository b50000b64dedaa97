"""The Kubernetes versions a stack may target are the ones every pinned chart
supports, kept in one place (tenantry/pins.py KUBERNETES_SUPPORT), and tenantry
can validate manifests for each of them offline."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate.utils
import yaml

from tenantry.pins import CHARTS_DIR, KUBERNETES_SUPPORT, supported_kubernetes
from tenantry.spec.cluster import ClusterSpec

ROOT = Path(__file__).resolve().parents[2]


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def test_every_pinned_chart_states_the_kubernetes_versions_it_supports():
    charts = {p.parent.name for p in CHARTS_DIR.glob("*/chart.yaml")}
    assert set(KUBERNETES_SUPPORT) == charts


def test_the_supported_range_is_what_every_chart_supports():
    oldest, newest = supported_kubernetes()
    assert (oldest, newest) == ("1.34", "1.36")
    for chart, (low, high) in KUBERNETES_SUPPORT.items():
        assert _minor(low) <= _minor(oldest) and _minor(newest) <= _minor(high), chart


def test_every_supported_version_has_offline_schemas():
    offline = {".".join(v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions()}
    oldest, newest = supported_kubernetes()
    assert {f"1.{m}" for m in range(_minor(oldest), _minor(newest) + 1)} <= offline


def test_shipped_stacks_and_the_default_target_a_supported_version():
    oldest, newest = supported_kubernetes()
    versions = {p.name: yaml.safe_load(p.read_text())["cluster"].get("kubernetes_version")
                for p in sorted((ROOT / "stacks").glob("*.yaml")) if not p.name.startswith("Pulumi.")}
    versions["default"] = ClusterSpec.model_fields["kubernetes_version"].default
    for where, version in versions.items():
        assert _minor(oldest) <= _minor(version) <= _minor(newest), (where, version)
