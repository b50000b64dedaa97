"""The mid-stream fault's agent (tenantry/gate/fault_agent.py) against an engine's /metrics served here."""

from __future__ import annotations

import pytest


def _metrics_server(running_from: int):
    """An engine's /metrics that reports one tiny request running from its `running_from`-th answer on."""
    import http.server
    import threading

    answers = []

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            answers.append(self.path)
            running = 1 if len(answers) >= running_from else 0
            body = f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}.0\n'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, answers


@pytest.mark.parametrize(("running_from", "seen"), [(3, 1.0), (10**9, 0.0)], ids=["once-running", "never"])
def test_the_fault_agent_runs_the_command_once_the_engine_reports_a_request_running(tmp_path, running_from, seen):
    """The mid-stream fault's command waits in a process of its own for vLLM's own count to show a request
    running (never for longer than its wait), then runs: it cannot land between streams as a stalled load
    generator's did."""
    import json
    import sys

    from tenantry.gate.fault_agent import agent_command
    from tenantry.gate.target import run_fault_command

    server, answers = _metrics_server(running_from)
    marker = tmp_path / "ran"
    try:
        metrics = [f"http://127.0.0.1:{server.server_port}/metrics"]
        command = agent_command("kill-engine", {"kill-engine": f"sh -c 'echo {{engine}} > {marker}'"}, metrics, "tiny",
                                0.5)
        assert command.startswith(sys.executable)
        result = run_fault_command(command, "tiny")
    finally:
        server.shutdown()
    assert result.startswith("exit 0 ")
    report = json.loads(result.removeprefix("exit 0 "))
    assert (report["running"], report["exit"], marker.read_text().strip()) == (seen, 0, "tiny")
    # It asked until the engine ran one; never running, it asked and ran once its wait was over (how many times it
    # asked within 0.5 s is the machine's: a loaded one (CI beside a live stack) fits one poll in).
    assert len(answers) >= (running_from if seen else 1)


def test_the_fault_agent_freezes_the_engines_group_before_its_command_and_continues_it_after(tmp_path):
    """With the target's engine-group command, the engine is stopped (SIGSTOP) the moment it reports the stream
    running, so the stream cannot end while the fault's command starts; the command sees it stopped, and a group
    the command left alive runs again afterwards."""
    import json
    import subprocess

    from tenantry.gate.fault_agent import ENGINE_GROUP, agent_command
    from tenantry.gate.target import run_fault_command

    server, _ = _metrics_server(running_from=1)
    engine = subprocess.Popen(["sleep", "120"], start_new_session=True)  # leads a process group, as vLLM's does
    seen = tmp_path / "state"
    try:
        metrics = [f"http://127.0.0.1:{server.server_port}/metrics"]
        commands = {"kill-engine": f"sh -c 'grep ^State: /proc/{engine.pid}/status > {seen}'",
                    ENGINE_GROUP: f"echo {engine.pid}"}
        command = agent_command("kill-engine", commands, metrics, "tiny", 5)
        result = run_fault_command(command, "tiny")
        after = next(line for line in open(f"/proc/{engine.pid}/status") if line.startswith("State:"))
    finally:
        server.shutdown()
        engine.kill()
        engine.wait()
    report = json.loads(result.removeprefix("exit 0 "))
    assert (report["running"], report["frozen"], report["exit"]) == (1.0, True, 0)
    assert "T (stopped)" in seen.read_text(), seen.read_text()
    assert "T (stopped)" not in after, after


def test_without_a_group_to_freeze_the_fault_agent_runs_the_command_unfrozen(tmp_path):
    import json

    from tenantry.gate.fault_agent import ENGINE_GROUP, agent_command
    from tenantry.gate.target import run_fault_command

    server, _ = _metrics_server(running_from=1)
    try:
        metrics = [f"http://127.0.0.1:{server.server_port}/metrics"]
        command = agent_command("kill-engine", {"kill-engine": "true", ENGINE_GROUP: "true"}, metrics, "tiny", 5)
        report = json.loads(run_fault_command(command, "tiny").removeprefix("exit 0 "))
    finally:
        server.shutdown()
    assert (report["running"], report["frozen"], report["exit"]) == (1.0, False, 0)
