"""Every `pulumi up --target` URN a runbook or procedure gives names a resource of the program as the Pulumi
engine names it: the type of every enclosing component first (tenantry:platform:Platform$...), which the mock
runtime's own URNs leave out. `pulumi up --target` with a URN that names nothing changes nothing, and says so
only after the preview; the MIG repartition's targets once lacked the Platform."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.manifests.tampering import planned_rendering

ROOT = Path(__file__).resolve().parents[2]
TARGET = re.compile(r'--target "(urn:pulumi:[^"]+)"')
STACK = "h100-mig-mixed"
"""A stack with every component a procedure targets (MIG pools, the GPU Operator)."""


def _targets() -> list[tuple[str, str]]:
    pages = sorted((ROOT / "runbooks").rglob("*.md")) + sorted((ROOT / "docs").glob("*.md"))
    return [(str(page.relative_to(ROOT)), urn.replace("\\$", "$").replace("$STACK", STACK))
            for page in pages for urn in TARGET.findall(page.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def engine_urns() -> set[str]:
    _, rendering, _ = planned_rendering(STACK)
    return {rendering.engine_urn(r) for r in rendering.resources}


def test_every_target_a_page_gives_names_a_resource_as_the_engine_names_it(engine_urns):
    targets = _targets()
    assert targets, "no --target in the runbooks: is the pattern still `--target \"urn:...\"`?"
    assert [(page, urn) for page, urn in targets if urn not in engine_urns] == []


def test_a_target_without_its_enclosing_components_names_nothing(engine_urns):
    without_platform = (f"urn:pulumi:{STACK}::tenantry::tenantry:gpu:GpuNodes$kubernetes:core/v1:ConfigMap::"
                        "tenantry-gpu-mig-parted")
    assert without_platform not in engine_urns
    assert without_platform.replace("tenantry::tenantry:gpu", "tenantry::tenantry:platform:Platform$tenantry:gpu") \
        in engine_urns
