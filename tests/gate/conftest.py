"""The SLO gate against a real local stack of stacks/local.yaml (the stack
`make local` runs), in a directory and on ports of its own, started in the
background as the session begins (tests/live_stacks.py) and stopped after these
tests. Each scenario runs in its short (CI) version through `tenantry gate`,
exactly as QA runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tenantry.local import stack as local
from tenantry.local.health import LocalStackError
from tenantry.local.layout import Layout, engine_process, gateway_process
from tenantry.local.supervisor import crashes
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
    """Runs `tenantry gate` against the test stack. A run during which a stack
    process, or a side gateway of --side-by-side (the gate says so), died of a
    signal is run once more, and the crash reported: the gate rightly fails a
    run that loses its gateway, and LiteLLM's own crashes are not what these
    tests are about (docs/decisions.md: Gate tests run a scenario again when a
    stack process crashed)."""

    def run(scenario: str, *extra: str) -> GateRun:
        for attempt in (1, 2):
            out = tmp_path / f"{scenario}-{attempt}" if attempt > 1 else tmp_path / scenario
            before = crashes(gate_stack)
            done = subprocess.run([str(TENANTRY), "gate", str(STACK), "--scenario", scenario, "--short", "--out",
                                   str(out), "--dir", str(gate_stack.root), "--port-base", str(gate_stack.port_base),
                                   *extra], capture_output=True, text=True, timeout=900, check=False,
                                  env={**os.environ, "COLUMNS": "200"})
            output = done.stdout + done.stderr
            print(output)  # shown when a test fails
            died = [line for line in crashes(gate_stack)[len(before):] if not _killed_by_the_run(line, out)]
            died += [line for line in output.splitlines() if " died of signal " in line]
            if not died or attempt == 2:
                return GateRun(done.returncode, output, out)
            warnings.warn(f"scenario {scenario} ran while a stack process crashed; running it again: {died}",
                          stacklevel=2)
            # The crashed process may not be back (supervisord gives up on one that dies again while
            # starting): `up` starts whatever is not running and waits until the stack serves.
            local.up(str(STACK), gate_stack, progress=lambda _: None)
        raise AssertionError("unreachable")

    return run


def _killed_by_the_run(crash: str, out: Path) -> bool:
    """A SIGKILL supervisord logged for a program the scenario killed on purpose (kill-engine,
    kill-gateway in the run's actions): the fault under test, not a crash."""
    programs = {"kill-engine": engine_process, "kill-gateway": lambda replica: gateway_process(int(replica))}
    for verdict in out.rglob("verdict.json"):
        for action in json.loads(verdict.read_text())["actions"]:
            if action.get("kind") in programs:
                program = programs[action["kind"]](action["action"].split()[-1])
                if f"{program} (terminated by SIGKILL" in crash:
                    return True
    return False
