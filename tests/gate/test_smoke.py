"""`make local` ends with `tenantry local smoke` on stacks/local.yaml, whose spot
tenant is paused on an engine for a while after any other tier's request. The
smoke must show every tenant served with text however recently the others
asked (it shares the gate's stack of stacks/local.yaml: the same stack `make
local` runs, started once)."""

from __future__ import annotations

import json
import os
import subprocess

import httpx

from tenantry.local.smoke import smoke
from tenantry.stacks import plan_stack
from tests.gate.conftest import STACK, TENANTRY


def test_the_smoke_waits_out_spots_pause_and_serves_every_tenant_with_text(gate_stack):
    plan = plan_stack(str(STACK))
    assert plan.gateway.spot_pause_after_others_seconds > 0  # what this test is about
    keys = json.loads(gate_stack.keys_file.read_text())
    port = gate_stack.ports(plan).gateway
    # The guaranteed tenant asks for tiny: spot is paused there from now on, for a while.
    answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60,
                        headers={"Authorization": f"Bearer {keys['acme']}"},
                        json={"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
    assert answer.status_code == 200, answer.text
    results = smoke(gate_stack)
    assert {r.tenant for r in results} == {t.name for t in plan.tenants}
    assert all(r.served and r.ok for r in results), results
    spot = next(r for r in results if r.tier == "spot")
    assert results[0] is spot  # spot first: the others' requests would pause it
    assert "shed: others-active" in spot.detail  # refused while paused, asked again after the pause, served


def test_make_locals_smoke_command_exits_0_with_a_line_per_tenant(gate_stack):
    done = subprocess.run([str(TENANTRY), "local", "smoke", "--dir", str(gate_stack.root), "--port-base",
                           str(gate_stack.port_base)], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == len(plan_stack(str(STACK)).tenants)
    assert all(line.startswith("✓") and "HTTP 200" in line and "tokens: '" in line for line in lines), lines
