"""Alertmanager's routing and inhibition, checked by Alertmanager itself:
Debian's amtool validates every stack's configuration and resolves each
alert's receiver, a real Alertmanager (on a free 127.0.0.1 port) says which
alerts a cause inhibits; and the local stack's pieces that deliver them."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from tenantry.local import services
from tenantry.local.alert_receiver import HEALTH_PATH, serve
from tenantry.local.layout import Layout
from tenantry.local.models import BuiltModel
from tenantry.monitoring.alertmanager import (
    CLUSTER_TIMING, ENGINE_DOWN_SILENCES, HEARTBEAT, PAGE, RECEIVERS, SILENT, TICKET, Webhook, alertmanager_config)
from tenantry.stacks import plan_stack
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
AMTOOL = shutil.which("amtool")
ALERTMANAGER = services.SYSTEM_PROGRAMS["alertmanager"][0]
LOCAL_RECEIVERS = {PAGE: Webhook(url="http://127.0.0.1:9/page"), TICKET: Webhook(url="http://127.0.0.1:9/ticket"),
                   HEARTBEAT: Webhook(url="http://127.0.0.1:9/heartbeat")}


def amtool(*args: str) -> subprocess.CompletedProcess:
    if AMTOOL is None:
        pytest.fail("amtool is missing: run `make test` (it installs Debian's prometheus-alertmanager)")
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    """The configuration of a stack with a tenant in every tier."""
    path = tmp_path_factory.mktemp("alertmanager") / "alertmanager.yml"
    path.write_text(yaml.safe_dump(alertmanager_config(plan_stack("h100x8-shared-70b"), LOCAL_RECEIVERS)))
    return path


@pytest.mark.parametrize("stack", STACKS)
def test_every_stacks_configuration_passes_amtool_check_config(stack, tmp_path):
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(alertmanager_config(plan_stack(stack), LOCAL_RECEIVERS)))
    checked = amtool("check-config", str(path))
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr


ROUTES = {
    "a guaranteed tenant's critical alert pages": (
        PAGE, {"alertname": "TenantTtftBudgetBurnFast", "severity": "critical", "tier": "guaranteed", "tenant": "t"}),
    "a best-effort tenant's critical alert is a ticket": (
        TICKET, {"alertname": "TenantErrorRateHigh", "severity": "critical", "tier": "best-effort", "tenant": "t"}),
    "a spot tenant's critical alert never pages": (
        TICKET, {"alertname": "TenantBudgetSpent", "severity": "critical", "tier": "spot", "threshold": "0.95"}),
    "a spot tenant's warning is a ticket": (
        TICKET, {"alertname": "TenantBudgetSpent", "severity": "warning", "tier": "spot", "threshold": "0.8"}),
    "a guaranteed tenant's warning is a ticket": (
        TICKET, {"alertname": "TenantTtftBudgetBurnSlow", "severity": "warning", "tier": "guaranteed"}),
    "a platform critical alert (no tier) pages": (PAGE, {"alertname": "EngineDown", "severity": "critical", "engine": "e"}),
    "a platform warning is a ticket": (TICKET, {"alertname": "EngineQueueBacklog", "severity": "warning", "engine": "e"}),
    "info is silent, even a guaranteed tenant's": (
        SILENT, {"alertname": "TenantBudgetSpent", "severity": "info", "tier": "guaranteed", "threshold": "0.5"}),
    "the chart's Watchdog goes to the dead man's switch": (HEARTBEAT, {"alertname": "Watchdog", "severity": "none"}),
    "the chart's InfoInhibitor is silent": (SILENT, {"alertname": "InfoInhibitor", "severity": "none"}),
    "an unforeseen severity is a ticket, not lost": (TICKET, {"alertname": "Unforeseen", "severity": "page-me"}),
}


@pytest.mark.parametrize("case", ROUTES)
def test_amtool_routes_each_alert_to_its_receiver(case, config_file):
    receiver, labels = ROUTES[case]
    routed = amtool("config", "routes", "test", f"--config.file={config_file}", f"--verify.receivers={receiver}",
                    *(f"{k}={v}" for k, v in labels.items()))
    assert routed.returncode == 0, f"{case}: routed to {routed.stdout.strip()}, wanted {receiver}"


def test_receivers_without_a_webhook_have_no_integration_and_silent_never_has_one():
    plan = plan_stack("local")
    config = alertmanager_config(plan, {PAGE: Webhook(url_file="/secrets/page")})
    receivers = {r["name"]: r for r in config["receivers"]}
    assert list(receivers) == list(RECEIVERS)
    assert receivers[PAGE]["webhook_configs"] == [{"url_file": "/secrets/page", "send_resolved": True}]
    assert "webhook_configs" not in receivers[TICKET] and "webhook_configs" not in receivers[SILENT]
    assert config["route"]["group_wait"] == CLUSTER_TIMING.group_wait


def test_an_unknown_receiver_or_an_ambiguous_webhook_is_refused_by_name():
    with pytest.raises(ValueError, match="receivers: pager unknown"):
        alertmanager_config(plan_stack("local"), {"pager": Webhook(url="http://127.0.0.1:9/")})
    with pytest.raises(ValueError, match="exactly one of url and url_file"):
        Webhook(url="http://127.0.0.1:9/", url_file="/secrets/page")


@contextmanager
def running_alertmanager(config_file: Path, folder: Path) -> Iterator[str]:
    """Debian's Alertmanager on a free port, without clustering; its URL."""
    if not ALERTMANAGER.exists():
        pytest.fail(f"{ALERTMANAGER} is missing: run `make test` (it installs Debian's prometheus-alertmanager)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (folder / "alertmanager.log").open("w")
    process = subprocess.Popen([str(ALERTMANAGER), f"--config.file={config_file}", f"--storage.path={folder / 'data'}",
                                f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail(f"Alertmanager did not start: {(folder / 'alertmanager.log').read_text()}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def test_an_engine_down_inhibits_its_own_latency_alerts_and_nobody_elses(config_file, tmp_path):
    def alert(name: str, severity: str, **labels: str) -> dict:
        return {"labels": {"alertname": name, "severity": severity, **labels}}

    sent = [
        alert("EngineDown", "critical", engine="tiny"),
        *(alert(name, "warning", engine="tiny") for name in ENGINE_DOWN_SILENCES),
        alert("EngineQueueBacklog", "warning", engine="micro"),
        # The tenants' alerts carry no engine: each is about the tenant over all its engines.
        alert("TenantTtftBudgetBurnFast", "critical", tenant="acme", tier="guaranteed", objective="ttft"),
        alert("TenantErrorRateHigh", "critical", tenant="acme", tier="guaranteed"),
        alert("TenantItlBudgetBurnFast", "critical", tenant="globex", tier="best-effort", objective="itl"),
        alert("TenantItlBudgetBurnSlow", "warning", tenant="globex", tier="best-effort", objective="itl"),
        alert("TenantItlBudgetBurnSlow", "warning", tenant="acme", tier="guaranteed", objective="itl"),
        alert("PostgresDown", "critical"),
        alert("PostgresSpendWritesFailing", "critical"),
    ]
    with running_alertmanager(config_file, tmp_path) as url:
        assert httpx.post(f"{url}/api/v2/alerts", json=sent, timeout=10).status_code == 200
        held = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
    inhibited = {(a["labels"]["alertname"], a["labels"].get("engine"), a["labels"].get("tenant"))
                 for a in held if a["status"]["inhibitedBy"]}
    assert len(held) == len(sent)
    assert inhibited == {
        *((name, "tiny", None) for name in ENGINE_DOWN_SILENCES),
        ("TenantItlBudgetBurnSlow", None, "globex"),  # its fast burn fires for the same tenant
        ("PostgresSpendWritesFailing", None, None),
    }


def test_the_alert_receiver_records_each_post_with_its_path(tmp_path):
    out = tmp_path / "alerts" / "received.jsonl"
    server = serve("127.0.0.1", 0, out)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert httpx.get(f"{url}{HEALTH_PATH}", timeout=5).status_code == 200
        assert httpx.post(f"{url}/page", json={"status": "firing"}, timeout=5).status_code == 200
        assert httpx.post(f"{url}/ticket", content=b"not json", timeout=5).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["path"], r["body"]) for r in records] == [("/page", {"status": "firing"}), ("/ticket", "not json")]


def test_the_local_prometheus_loads_the_rules_and_alerts_the_local_alertmanager(tmp_path):
    plan = plan_stack("local")
    layout = Layout(tmp_path, 29100)
    ports = layout.ports(plan)
    config = yaml.safe_load(services.prometheus_yml(plan, layout, ports, tmp_path / "master-key").read_text())
    rules = Path(config["rule_files"][0])
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert config["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": [f"127.0.0.1:{ports.alertmanager}"]}]}]
    assert ports.alertmanager == 29104 and ports.alert_receiver == 29193


def test_the_local_alertmanager_delivers_a_page_a_ticket_and_the_heartbeat_to_the_receiver(tmp_path):
    """What the local stack runs, delivering: its routing and timing (alertmanager_yml's), a real Alertmanager and
    the real receiver, each on a free port; a page, a ticket and the Watchdog posted as Prometheus posts them
    arrive at /page, /ticket and /heartbeat (the dead man's switch)."""
    plan = plan_stack("local")
    layout = Layout(tmp_path, 29100)
    ports = layout.ports(plan)
    config = yaml.safe_load(services.alertmanager_yml(plan, layout, ports).read_text())
    urls = {r["name"]: [w["url"] for w in r.get("webhook_configs", [])] for r in config["receivers"]}
    assert urls == {PAGE: [f"http://127.0.0.1:{ports.alert_receiver}/page"],
                    TICKET: [f"http://127.0.0.1:{ports.alert_receiver}/ticket"],
                    HEARTBEAT: [f"http://127.0.0.1:{ports.alert_receiver}/heartbeat"], SILENT: []}
    received = tmp_path / "received.jsonl"
    receiver = serve("127.0.0.1", 0, received)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    here = f"http://127.0.0.1:{receiver.server_address[1]}"
    for entry in config["receivers"]:  # the same configuration, delivering to this test's receiver
        for webhook in entry.get("webhook_configs", []):
            webhook["url"] = webhook["url"].replace(f"http://127.0.0.1:{ports.alert_receiver}", here)
    config_file = tmp_path / "alertmanager.yml"
    config_file.write_text(yaml.safe_dump(config))
    sent = [{"labels": {"alertname": "EngineDown", "severity": "critical", "engine": "tiny"}},
            {"labels": {"alertname": "EngineQueueBacklog", "severity": "warning", "engine": "micro"}},
            {"labels": {"alertname": "Watchdog", "severity": "none"}}]
    try:
        with running_alertmanager(config_file, tmp_path) as url:
            assert httpx.post(f"{url}/api/v2/alerts", json=sent, timeout=10).status_code == 200
            delivered = _deliveries(received, count=3, within_seconds=120)
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert sorted((path, alert) for path, alerts in delivered for alert in alerts) == [
        ("/heartbeat", "Watchdog"), ("/page", "EngineDown"), ("/ticket", "EngineQueueBacklog")]


def _deliveries(received: Path, count: int, within_seconds: float) -> list[tuple[str, list[str]]]:
    """Each notification the receiver recorded (its path, the names of the alerts it carried), polled until count
    have arrived; fewer after within_seconds fails with what did arrive. Alertmanager holds a group for group_wait
    first, so this waits on Alertmanager, not on a guess."""
    records: list[dict] = []
    deadline = time.monotonic() + within_seconds
    while time.monotonic() < deadline:
        records = [json.loads(line) for line in received.read_text().splitlines()] if received.exists() else []
        if len(records) >= count:
            break
        time.sleep(0.5)
    assert len(records) >= count, f"{len(records)} of {count} notifications delivered: {records}"
    return [(r["path"], [a["labels"]["alertname"] for a in r["body"]["alerts"]]) for r in records]


def test_the_local_stack_runs_one_alertmanager_and_the_receiver_with_its_files(tmp_path):
    plan = plan_stack("local")
    layout = Layout(tmp_path, 29100)
    ports = layout.ports(plan)
    config = yaml.safe_load(services.alertmanager_yml(plan, layout, ports).read_text())
    assert config["route"]["group_wait"] == services.ALERT_TIMING.group_wait
    assert config["route"]["routes"] == alertmanager_config(plan, LOCAL_RECEIVERS)["route"]["routes"]
    built = {e.name: BuiltModel(e.name, tmp_path / e.name / "model", tmp_path / e.name / "adapters") for e in plan.engines}
    conf = services.supervisor_conf(plan, layout, ports, built, {}, run_as=None).read_text()
    commands = {section.split("]")[0]: shlex.split(section.split("command=")[1].split("\n")[0])
                for section in conf.split("[program:")[1:]}
    assert {"--cluster.listen-address=",  # one Alertmanager: no gossip
            f"--web.listen-address=127.0.0.1:{ports.alertmanager}",
            f"--storage.path={layout.alertmanager / 'data'}"} <= set(commands["alertmanager"])
    assert commands["alert-receiver"][-2:] == ["--out", str(layout.alerts_received)]


def test_the_procedures_silence_holds_back_what_it_names_and_nothing_else(config_file, tmp_path):
    """runbooks/procedures/silence-planned-work.md's own `amtool silence add` for an engine, run as on-call runs it
    against a real Alertmanager: the engine's alerts are suppressed by it, another engine's are not."""
    page = (ROOT / "runbooks" / "procedures" / "silence-planned-work.md").read_text(encoding="utf-8")
    (command,) = [line.strip() for line in page.splitlines() if line.strip().startswith("amtool silence add")
                  and 'engine="$ENGINE"' in line]
    sent = [{"labels": {"alertname": "EngineQueueBacklog", "severity": "warning", "engine": engine}}
            for engine in ("tiny", "micro")]
    with running_alertmanager(config_file, tmp_path) as url:
        values = {"ALERTMANAGER": url, "USER": "on-call", "ENGINE": "tiny"}
        argv = [re.sub(r"\$(\w+)", lambda m: values[m.group(1)], word) for word in shlex.split(command)]
        added = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert added.returncode == 0, added.stderr
        assert httpx.post(f"{url}/api/v2/alerts", json=sent, timeout=10).status_code == 200
        held = {a["labels"]["engine"]: a["status"] for a in httpx.get(f"{url}/api/v2/alerts", timeout=10).json()}
    assert held["tiny"]["state"] == "suppressed" and held["tiny"]["silencedBy"] == [added.stdout.strip()]
    assert held["micro"]["state"] == "active" and held["micro"]["silencedBy"] == []
