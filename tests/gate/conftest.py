"""The SLO gate against a real local stack of stacks/local.yaml (the stack
`make local` runs), in a directory and on ports of its own, started in the
background as the session begins (tests/live_stacks.py) and stopped after these
tests. Each scenario runs in its short (CI) version through `tenantry gate`,
exactly as QA runs it, with latency reported rather than judged (`--latency reported`): on two shared cores the
tests judge who was served, shed and refused, and latency only as a ratio within a run (issue 33; docs/decisions.md:
CI judges what a shared machine can judge)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tenantry.local.health import LocalStackError
from tenantry.local.layout import Layout
from tests import live_stacks

STACK = live_stacks.GATE.spec
TENANTRY = Path(sys.executable).parent / "tenantry"


@dataclass
class GateRun:
    exit_code: int
    output: str
    directory: Path

    def verdict(self, run: str = "") -> dict:
        return json.loads((self.directory / run / "verdict.json").read_text())

    def tenant(self, name: str, run: str = "") -> dict:
        return self.verdict(run)["tenants"][name]

    def check(self, name: str, run: str = "") -> dict:
        return next(c for c in self.verdict(run)["checks"] if c["name"] == name)


@pytest.fixture(scope="package")
def gate_stack(request) -> Layout:
    try:
        live_stacks.up(live_stacks.GATE)  # started in the background as the session began
    except LocalStackError as error:
        pytest.fail(str(error))
    yield live_stacks.GATE.layout()
    # A failed session keeps the stack's logs in its directory (the next session removes them).
    leftover = live_stacks.down(live_stacks.GATE, keep_logs=request.session.testsfailed > 0)
    assert leftover == [], f"processes survived supervisor's shutdown and were killed: {leftover}"


@pytest.fixture
def gate(gate_stack: Layout, tmp_path: Path):
    """Runs `tenantry gate` against the test stack; a stack process crashing meanwhile fails the test
    (live_stacks.gate_run_failing_on_a_crash)."""

    def run(scenario: str, *extra: str) -> GateRun:
        def once() -> tuple[GateRun, str, Path]:
            out = tmp_path / scenario
            done = subprocess.run([str(TENANTRY), "gate", str(STACK), "--scenario", scenario, "--short", "--out",
                                   str(out), "--dir", str(gate_stack.root), "--port-base", str(gate_stack.port_base),
                                   "--latency", "reported", *extra], capture_output=True, text=True, timeout=900,
                                  check=False, env={**os.environ, "COLUMNS": "200"})
            output = done.stdout + done.stderr
            print(output)  # shown when a test fails
            return GateRun(done.returncode, output, out), output, out

        return live_stacks.gate_run_failing_on_a_crash(live_stacks.GATE, once)

    return run
