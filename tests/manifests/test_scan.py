"""checkov over every stack's rendered manifests: no finding that is not
waived, with its reason, in policy/checkov-waivers.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenantry.manifests.offline import write
from tenantry.manifests.scan import load_waivers, run_checkov, unwaived
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


@pytest.mark.parametrize("stack", STACKS)
def test_checkov_finds_nothing_unwaived(stack, tmp_path):
    write(shared_render(stack), tmp_path)
    findings, summary = run_checkov(tmp_path)
    assert summary["parsing_errors"] == 0 and summary["passed"] > 100, summary
    left = unwaived(findings, plan_stack(stack))
    assert left == [], "\n".join(f"{f.check_id} {f.check_name}: {f.resource}" for f in left)


def test_every_waiver_says_why_and_is_still_needed(tmp_path):
    waivers = load_waivers()
    for check, waiver in waivers.items():
        assert len(waiver["why"]) > 80 and waiver["applies_to"], check
    found: set[str] = set()
    for stack in ("h100-mig-mixed", "h200-many-adapters"):  # the second has a kv-aware engine's picker
        write(shared_render(stack), tmp_path / stack)
        found |= {f.check_id for f in run_checkov(tmp_path / stack)[0]}
    assert found == set(waivers), "a waiver that no longer matches anything should go"


def test_a_new_finding_is_not_waived(tmp_path):
    write(shared_render("local"), tmp_path)
    deployment = tmp_path / "tenantry" / "Deployment-tenantry-redis.yaml"
    deployment.write_text(deployment.read_text().replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"))
    findings, _ = run_checkov(tmp_path)
    assert any(f.check_id == "CKV_K8S_20" and "tenantry-redis" in f.resource for f in unwaived(findings, plan_stack("local")))
