"""What the gate asks of a Target, with fake targets and no Locust: each run
goes to its own folder, a lost gateway is reported, and every target is
closed and its engines restored however the runs went; and a remote target
refuses what it cannot run against."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tenantry.gate import run as gate_run
from tenantry.gate.target import GateError, remote_target, run_fault_command
from tenantry.stacks import plan_stack

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FakeTarget:
    label: str
    slug: str
    gateways: list[str] = field(default_factory=lambda: ["http://127.0.0.1:1"])
    keys_file: Path = Path("keys.json")
    fault_commands: dict = field(default_factory=dict)
    database_url: str | None = None
    engine_metrics: dict = field(default_factory=dict)
    lost_reason: str | None = None
    calls: list[str] = field(default_factory=list)

    def restore_engines(self, echo) -> None:
        self.calls.append("restore")

    def lost(self) -> str | None:
        return self.lost_reason

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def prepared():
    return gate_run.prepare(str(ROOT / "stacks" / "local.yaml"), "steady", short=True, tenant=None)


def test_side_by_side_runs_go_to_their_own_folders_and_a_lost_gateway_is_reported(prepared, tmp_path, monkeypatch):
    ran: list[Path] = []
    monkeypatch.setattr(gate_run, "run_locust", lambda _p, _t, out, *_a: ran.append(out) or gate_run.RunResult(0, None))
    on, off = FakeTarget("with", "policy-on"), FakeTarget("without", "policy-off", lost_reason="gateway-plain died")
    results, lost = gate_run.run_targets(prepared, [on, off], tmp_path, True, None, echo=lambda _: None)
    assert ran == [tmp_path / "policy-on", tmp_path / "policy-off"] and len(results) == 2
    assert lost == ["without: gateway-plain died; its figures measure a lost gateway"]
    # Restored before its run (the first may have stopped one); closed once its run is over, before the next
    # starts (a side gateway's memory is the next run's); closed and restored again at the end.
    assert on.calls == ["close", "close", "restore"]
    assert off.calls == ["restore", "close", "close", "restore"]


def test_every_target_is_closed_and_restored_when_a_run_fails(prepared, tmp_path, monkeypatch):
    def fail(*_args):
        raise GateError("Locust ended without a verdict")

    monkeypatch.setattr(gate_run, "run_locust", fail)
    on, off = FakeTarget("with", "policy-on"), FakeTarget("without", "policy-off")
    with pytest.raises(GateError):
        gate_run.run_targets(prepared, [on, off], tmp_path, True, None, echo=lambda _: None)
    assert on.calls == ["close", "restore"] and off.calls == ["close", "restore"]


def test_one_target_runs_in_the_output_folder_itself(prepared, tmp_path, monkeypatch):
    ran: list[Path] = []
    monkeypatch.setattr(gate_run, "run_locust", lambda _p, _t, out, *_a: ran.append(out) or gate_run.RunResult(1, None))
    results, lost = gate_run.run_targets(prepared, [FakeTarget("gateway", "gateway")], tmp_path, True, None,
                                         echo=lambda _: None)
    assert ran == [tmp_path] and results[0].exit_code == 1 and lost == []


def test_a_remote_target_needs_a_url_and_a_key_for_every_tenant(tmp_path):
    plan = plan_stack(ROOT / "stacks" / "local.yaml")
    keys = tmp_path / "keys.json"
    with pytest.raises(GateError, match="no such file"):
        remote_target("https://gw.example.com", keys, plan, None)
    keys.write_text("not json")
    with pytest.raises(GateError, match="not JSON"):
        remote_target("https://gw.example.com", keys, plan, None)
    keys.write_text(json.dumps({"acme": "sk-1"}))
    with pytest.raises(GateError, match="no key for tenant"):
        remote_target("https://gw.example.com", keys, plan, None)
    keys.write_text(json.dumps({t.name: "sk" for t in plan.tenants}))
    with pytest.raises(GateError, match="give a URL"):
        remote_target("gw.example.com", keys, plan, None)
    target = remote_target("https://gw.example.com/", keys, plan,
                           {"stop-engine": "kubectl scale --replicas=0 deploy/{engine}"})
    assert target.gateways == ["https://gw.example.com"] and target.fault_commands["stop-engine"].endswith("{engine}")
    assert target.lost() is None


def test_a_fault_command_gets_its_subject_and_its_result_is_recorded_with_the_exit_code():
    assert run_fault_command("sh -c 'echo stopping {engine}; exit 3'", "tiny") == "exit 3 stopping tiny"
    assert run_fault_command("echo {tenant} {replica}", "globex") == "exit 0 globex globex"
