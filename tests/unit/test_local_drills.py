"""`tenantry local drill`: which notifications count as a drill's alert arriving and
resolving (read from a receiver file as Alertmanager's posts are recorded), and that
every alert a drill waits for is a rule of the local stack. The drills themselves
run against the live stack in tests/local/test_alerts_live.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from tenantry.cli import parser as build_parser
from tenantry.local import drills
from tenantry.monitoring.rules import rule_groups
from tenantry.stacks import plan_stack


def _post(out: Path, path: str, received_at: float, alerts: list[tuple[str, str, dict, float]]) -> None:
    body = {"alerts": [{"status": status, "labels": {"alertname": name, **labels},
                        "startsAt": datetime.fromtimestamp(starts, timezone.utc).isoformat().replace("+00:00", "Z")}
                       for name, status, labels, starts in alerts]}
    with out.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"path": path, "received_at": received_at, "body": body}) + "\n")


def test_an_alert_counts_when_it_began_after_the_stop_and_its_resolve_when_it_is_the_same_alert(tmp_path):
    out = tmp_path / "received.jsonl"
    stopped = 1_000_000.0
    _post(out, "/page", stopped + 5, [("EngineDown", "firing", {"engine": "micro"}, stopped - 300)])  # an older one
    _post(out, "/page", stopped + 70, [("EngineDown", "firing", {"engine": "tiny"}, stopped + 60)])  # another engine
    _post(out, "/page", stopped + 90, [("EngineDown", "firing", {"engine": "micro"}, stopped + 80)])
    _post(out, "/page", stopped + 300, [("EngineDown", "resolved", {"engine": "micro"}, stopped - 300),
                                        ("EngineDown", "resolved", {"engine": "micro"}, stopped + 80)])

    class Layout:
        alerts_received = out

    firing = drills._wait(Layout, stopped, 1, ("EngineDown",), {"engine": "micro"},
                          lambda n: n.status == "firing" and n.starts_at >= stopped)
    assert firing["EngineDown"].received_at == stopped + 90
    resolved = drills._wait(Layout, stopped, 1, ("EngineDown",), {"engine": "micro"},
                            lambda n: n.status == "resolved" and n.starts_at == firing["EngineDown"].starts_at)
    assert resolved["EngineDown"].received_at == stopped + 300
    assert drills._wait(Layout, stopped, 1, ("PostgresDown",), {}, lambda n: True) == {}


def test_every_alert_a_drill_waits_for_is_a_rule_of_the_local_stack_and_the_cli_offers_every_drill():
    alerts = {r["alert"] for g in rule_groups(plan_stack("local")) for r in g["rules"] if "alert" in r}
    assert {a for f in drills.FAULTS.values() for a in f.alerts} <= alerts
    local = build_parser()._subparsers._group_actions[0].choices["local"]
    drill = local._subparsers._group_actions[0].choices["drill"]
    (faults,) = [a for a in drill._actions if a.dest == "faults"]
    assert set(faults.choices) == set(drills.FAULTS)


def test_a_rules_for_is_read_as_prometheus_writes_it():
    assert drills.for_seconds({"for": "1m30s"}) == 90
    assert drills.for_seconds({"for": "0m"}) == drills.for_seconds({}) == 0
