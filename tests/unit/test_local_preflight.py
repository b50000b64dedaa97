"""What `tenantry local up` says before it starts anything, and the pieces it
renders from the Plan (no processes here; tests/local runs the real stack)."""

from __future__ import annotations

import contextlib

import socket
import subprocess
import sys
from pathlib import Path

import yaml

from tenantry.local import services
from tenantry.local.layout import Layout
from tenantry.local.models import BuiltModel, job_for
from tenantry.local.health import process_alive
from tenantry.local.side_gateways import side_gateway_lost
from tenantry.local.stack import preflight
from tenantry.stacks import plan_stack


def test_a_port_in_use_is_named_with_the_fix(tmp_path):
    plan = plan_stack("local")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        layout = Layout(tmp_path, port)  # the gateway's port is the base
        problems = preflight(plan, layout, layout.ports(plan))
    assert any(f"port {port} (gateway-0) is already in use" in p and "--port-base" in p for p in problems), problems


def test_a_missing_system_program_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(services.SYSTEM_PROGRAMS, "redis-server", (Path("/nonexistent/redis-server"), "redis-server"))
    plan = plan_stack("local")
    layout = Layout(tmp_path, 29100)
    problems = preflight(plan, layout, layout.ports(plan))
    assert any("redis-server is missing" in p and "make local" in p and "apt-get install redis-server" in p
               for p in problems), problems


def test_model_recipes_follow_the_catalog_and_the_adapters(tmp_path):
    tiny = plan_stack("local").engine("tiny")
    job = job_for(tiny, tmp_path)
    assert job["architecture"]["layers"] == 2 and job["architecture"]["total_parameters"] == 2_229_504
    assert [a["name"] for a in job["adapters"]] == ["acme-support", "globex-legal"]
    assert job == job_for(tiny, tmp_path)  # deterministic: same recipe, same folder
    changed = plan_stack("h100x8-shared-70b").engine("llama-70b")
    try:
        job_for(changed, tmp_path)
    except Exception as error:  # noqa: BLE001 - the message is what matters
        assert "builds only the catalog's local models" in str(error)
    else:
        raise AssertionError("a Hub model must not be built locally")


def test_supervisor_runs_every_engine_with_the_plans_arguments(tmp_path):
    plan = plan_stack("local")
    layout = Layout(tmp_path, 29100)
    ports = layout.ports(plan)
    built = {e.name: BuiltModel(e.name, tmp_path / e.name / "model", tmp_path / e.name / "adapters") for e in plan.engines}
    conf = services.supervisor_conf(plan, layout, ports, built, {"SECRET": "50%"}, run_as=None).read_text()
    assert "[program:engine-tiny]" in conf and "[program:engine-micro]" in conf and "[program:gateway-0]" in conf
    assert "--max-num-seqs 8" in conf and "--max-loras 2" in conf and "--host 127.0.0.1" in conf
    assert 'SECRET="50%%"' in conf  # supervisor would read a bare % as interpolation
    assert (tmp_path / "supervisord.conf").stat().st_mode & 0o077 == 0


def test_one_map_names_every_supervised_process_with_its_port(tmp_path):
    plan = plan_stack("tests/local/stack.yaml")  # two gateway replicas, two engines
    layout = Layout(tmp_path, 29100)
    ports = layout.ports(plan)
    built = {e.name: BuiltModel(e.name, tmp_path / e.name / "model", tmp_path / e.name / "adapters") for e in plan.engines}
    conf = services.supervisor_conf(plan, layout, ports, built, {}, run_as=None).read_text()
    programs = {line[len("[program:"):-1] for line in conf.splitlines() if line.startswith("[program:")}
    assert programs == set(ports.by_process()) == {"gateway-0", "gateway-1", "postgres", "redis", "prometheus",
                                                   "alertmanager", "alert-receiver", "engine-tiny", "engine-micro"}
    assert len(set(ports.by_process().values())) == len(programs)  # no two on one port
    for name, port in ports.by_process().items():
        if name.startswith(("engine-", "gateway-")):
            assert f"--port {port}" in conf.split(f"[program:{name}]")[1].split("[program:")[0], name


def test_side_gateways_listen_clear_of_the_stack(tmp_path):
    plan = plan_stack("tests/local/stack.yaml")
    layout = Layout(tmp_path, 29100)
    side = layout.side_gateway_ports()
    assert set(side) == {"gateway-policy", "gateway-plain"}
    assert not set(side.values()) & set(layout.ports(plan).by_process().values())


def test_the_local_target_does_every_fault_through_its_own_supervisor_and_the_budget_through_its_gateway(tmp_path):
    import shlex
    import sys

    from tenantry.gate.fault_agent import ENGINE_GROUP
    from tenantry.gate.scenario_model import FAULTS, RESTORES
    from tenantry.local.budget import budget_commands
    from tenantry.local.supervisor import SUPERVISORCTL, fault_commands

    layout = Layout(tmp_path / "a stack", 29100)
    commands = fault_commands(layout) | budget_commands(layout)
    assert set(commands) == {*FAULTS, *RESTORES.values(), ENGINE_GROUP}
    local_budget = [sys.executable, "-m", "tenantry", "local", "budget", "globex", "--dir", str(layout.root),
                    "--port-base", "29100"]
    assert shlex.split(commands["exhaust-budget"].format(tenant="globex")) == local_budget
    assert shlex.split(commands["restore-budget"].format(tenant="globex")) == [*local_budget, "--restore"]
    ctl = [str(SUPERVISORCTL), "-c", str(layout.supervisor_conf)]
    assert shlex.split(commands["stop-engine"].format(engine="tiny")) == [*ctl, "stop", "engine-tiny"]
    shell, flag, script = shlex.split(commands["kill-gateway"].format(replica="1"))
    assert (shell, flag) == ("sh", "-c") and script.startswith(f"pid=$({shlex.join(ctl)} pid gateway-1) && ")
    assert script.endswith('[ "$pid" -gt 1 ] && kill -KILL "-$pid"')  # the whole group, never group 0
    shell, flag, script = shlex.split(commands["kill-engine"].format(engine="tiny"))
    assert (shell, flag) == ("sh", "-c") and '-f -- "--served-model-name tiny ")' in script
    assert script.endswith('[ "$pid" -gt 1 ] && kill -KILL "-$pid"')
    assert commands[ENGINE_GROUP].format(engine="tiny") in script  # the group frozen is the group killed


def test_a_kill_command_kills_the_whole_process_group_and_nothing_when_the_program_is_not_running(tmp_path):
    """The command's shell, run against a stand-in for supervisorctl that prints a PID: a process
    group of two sleeps dies whole; PID 0 (not running) sends nothing."""
    import os
    import shlex
    import signal
    import subprocess

    from tenantry.local.supervisor import _kill_process_group

    group = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)
    fake_ctl = tmp_path / "ctl"
    try:
        for pid, survives in ((0, True), (group.pid, False)):
            fake_ctl.write_text(f"#!/bin/sh\necho {pid}\n")
            fake_ctl.chmod(0o755)
            subprocess.run(shlex.split(_kill_process_group(shlex.quote(str(fake_ctl)), "engine-tiny")), check=False,
                           timeout=30)
            listed = subprocess.run(["pgrep", "-g", str(group.pid)], capture_output=True, text=True).stdout.split()
            members = [pid for pid in map(int, listed) if process_alive(pid)]  # a killed sleep may stay a zombie
            assert (len(members) == 3) is survives, members  # the group's sh and its two sleeps
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group.pid, signal.SIGKILL)
        group.wait(timeout=30)


ENGINE = ("import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)",)
"""A stand-in engine: a process group's leader (as supervisord starts each program) with a worker in its group."""
SUPERVISOR = ("import subprocess, sys, time\n"
              "for name in ('tiny', 'tinyx'):\n"
              "    subprocess.Popen([sys.executable, '-c', sys.argv[1], '--served-model-name', name, '--host', 'h'],"
              " start_new_session=True)\n"
              "time.sleep(60)\n")


def test_an_engine_kill_finds_the_engine_among_its_supervisors_children_and_kills_its_whole_group(tmp_path):
    """Against stand-ins: this stack's supervisord with engines tiny and tinyx, and another stack's tiny.
    The kill command takes tiny's whole group and nothing else."""
    import os
    import shlex
    import signal
    import subprocess
    import sys
    import time

    from tenantry.local.supervisor import fault_commands

    layout = Layout(tmp_path / "a stack", 29100)
    layout.supervisor_pid.parent.mkdir(parents=True)
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, *ENGINE])
    elsewhere = subprocess.Popen([sys.executable, "-c", *ENGINE, "--served-model-name", "tiny", "--host", "h"],
                                 start_new_session=True)
    layout.supervisor_pid.write_text(f"{supervisor.pid}\n")

    def groups() -> dict[str, list[int]]:
        """Each engine's live group members, by the name it serves and its parent."""
        found: dict[str, list[int]] = {}
        for parent, label in ((supervisor.pid, "here"), (os.getpid(), "elsewhere")):
            for name in ("tiny", "tinyx"):
                leader = subprocess.run(["pgrep", "-P", str(parent), "-f", "--", f"--served-model-name {name} "],
                                        capture_output=True, text=True).stdout.split()
                for pid in leader:
                    listed = subprocess.run(["pgrep", "-g", pid], capture_output=True, text=True).stdout.split()
                    found[f"{name} {label}"] = [p for p in map(int, listed) if process_alive(p)]
        return found

    try:
        deadline = time.monotonic() + 30
        while [len(m) for m in groups().values()] != [2, 2, 2] and time.monotonic() < deadline:
            time.sleep(0.1)  # every stand-in and its worker started
        assert sorted(groups()) == ["tiny elsewhere", "tiny here", "tinyx here"]
        command = fault_commands(layout)["kill-engine"].format(engine="tiny")
        assert subprocess.run(shlex.split(command), timeout=30, check=False).returncode == 0
        deadline = time.monotonic() + 30
        while groups().get("tiny here") and time.monotonic() < deadline:
            time.sleep(0.1)  # until the killed group is gone, not a guess at how long that takes
        alive = groups()
        assert alive.get("tiny here", []) == [] and len(alive["tinyx here"]) == len(alive["tiny elsewhere"]) == 2, alive
    finally:
        for pid in (int(p) for p in subprocess.run(["pgrep", "-P", str(supervisor.pid)], capture_output=True,
                                                   text=True).stdout.split()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(elsewhere.pid, signal.SIGKILL)
        supervisor.kill()
        supervisor.wait(timeout=30)
        elsewhere.wait(timeout=30)


def test_prometheus_scrapes_the_same_jobs_as_on_kubernetes(tmp_path):
    plan = plan_stack("local")
    layout = Layout(tmp_path, 29100)
    config = yaml.safe_load(services.prometheus_yml(plan, layout, layout.ports(plan), tmp_path / "key").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"tiny", "micro", "tenantry-gateway"}
    assert jobs["tenantry-gateway"]["metrics_path"] == "/metrics/"
    assert jobs["tenantry-gateway"]["authorization"]["credentials_file"] == str(tmp_path / "key")


def test_zombies_count_as_gone():
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    assert process_alive(child.pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process_alive(child.pid):
        time.sleep(0.05)  # exited but not reaped yet: a zombie, which must count as gone
    assert not process_alive(child.pid)
    child.wait()
    assert not process_alive(999_999_999)


def test_a_side_gateway_that_died_is_named_with_the_signal_and_its_log(tmp_path):
    layout = Layout(tmp_path, 19990)
    crash = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    crash.wait(30)
    assert side_gateway_lost(layout, "gateway-policy", crash) == (
        f"gateway-policy died of signal SIGSEGV during the run: see {layout.logs / 'gateway-policy.log'}")
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    exited.wait(30)
    assert "gateway-plain exited with code 3 during the run" in side_gateway_lost(layout, "gateway-plain", exited)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert side_gateway_lost(layout, "gateway-plain", running) is None
    finally:
        running.kill()
        running.wait(10)


def test_the_smoke_passes_served_tenants_and_lower_tiers_shed_for_capacity_only():
    from tenantry.local.smoke import SmokeResult

    def result(tier, status=200, text="ab cd", shed=None):
        return SmokeResult("t", tier, "tiny", status, 0.1, "", text, shed)

    assert result("guaranteed").ok and result("spot").ok
    assert not result("guaranteed", text=" ").ok  # an answer without visible text is a failure
    assert result("spot", 429, "", "others-active").ok and result("best-effort", 429, "", "saturated").ok
    assert not result("guaranteed", 429, "", "saturated").ok  # its reservation was not kept
    for failure in (result("spot", 429, ""), result("spot", 403, ""), result("spot", 500, ""), result("spot", 0, "")):
        assert not failure.ok  # the tenant's own quota, a refused key, a 5xx, no answer


def test_purge_deletes_the_stack_but_keeps_the_model_cache_inside_it(tmp_path, monkeypatch):
    from tenantry.local.stack import down

    root = tmp_path / ".local"
    cache = root / "models"
    (cache / "tenantry-tiny").mkdir(parents=True)
    (cache / "tenantry-tiny" / "model.safetensors").write_text("weights")
    for path in (root / "logs" / "gateway-0.log", root / "keys.json", root / "gate" / "run" / "report.html"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    monkeypatch.setenv("TENANTRY_MODEL_CACHE", str(cache))
    said: list[str] = []
    down(Layout(root, 29100), purge=True, progress=said.append)
    assert [p.relative_to(tmp_path) for p in sorted(root.rglob("*"))] == [
        Path(".local/models"), Path(".local/models/tenantry-tiny"), Path(".local/models/tenantry-tiny/model.safetensors")]
    assert f"removed {root} (kept the model cache {cache})" in said
    elsewhere = tmp_path / "other-stack"
    (elsewhere / "logs").mkdir(parents=True)
    down(Layout(elsewhere, 29100), purge=True, progress=said.append)
    assert not elsewhere.exists() and said[-1] == f"removed {elsewhere}"
