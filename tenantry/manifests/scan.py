"""checkov over rendered manifests, with tenantry's written waivers.

checkov runs from its own virtual environment (.venv-tools, made by `make
venv`): its dependencies are many and pinned independently of ours. Offline,
checkov reports no severities, so every failed check counts: it is fixed or
waived in policy/checkov-waivers.yaml with a reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tenantry.plan.model import Plan

ROOT = Path(__file__).resolve().parent.parent.parent
WAIVERS = ROOT / "policy" / "checkov-waivers.yaml"
CHECKOV = Path(os.environ.get("TENANTRY_CHECKOV", ROOT / ".venv-tools" / "bin" / "checkov"))


@dataclass(frozen=True)
class Finding:
    check_id: str
    check_name: str
    resource: str
    file: str


def run_checkov(directory: Path) -> tuple[list[Finding], dict[str, Any]]:
    if not CHECKOV.exists():
        raise FileNotFoundError(f"checkov not found at {CHECKOV}; run `make venv` (it installs .venv-tools)")
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE"}
    result = subprocess.run(
        [str(CHECKOV), "-d", str(directory), "--framework", "kubernetes", "-o", "json", "--quiet", "--compact"],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )
    report = json.loads(result.stdout) if result.stdout.strip() else {}
    if isinstance(report, list):  # one entry per framework
        report = report[0]
    failed = [
        Finding(f["check_id"], f.get("check_name", ""), f["resource"], f.get("file_path", ""))
        for f in (report.get("results") or {}).get("failed_checks", [])
    ]
    return failed, report.get("summary", {})


def load_waivers() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(WAIVERS.read_text(encoding="utf-8")) or {}


def waived_resources(selectors: list[str], plan: Plan) -> set[str] | None:
    """checkov resource ids (Kind.namespace.name) a waiver covers; None for all."""
    if "all" in selectors:
        return None
    ns = plan.platform.namespace
    ids: set[str] = set()
    if "engine" in selectors:
        ids |= {f"Deployment.{ns}.{e.name}" for e in plan.engines}
    if "gateway" in selectors:
        ids.add(f"Deployment.{ns}.tenantry-gateway")
    if "picker" in selectors:
        ids |= {f"Deployment.{ns}.{e.routing.pool}-epp" for e in plan.engines if e.routing}
    return ids


def unwaived(findings: list[Finding], plan: Plan) -> list[Finding]:
    waivers = load_waivers()
    left = []
    for finding in findings:
        waiver = waivers.get(finding.check_id)
        covered = waiver is not None and (
            (ids := waived_resources(list(waiver.get("applies_to", [])), plan)) is None or finding.resource in ids
        )
        if not covered:
            left.append(finding)
    return left
