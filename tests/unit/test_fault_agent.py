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
        command = agent_command(f"sh -c 'echo {{engine}} > {marker}'", metrics, "tiny", 0.5)
        assert command.startswith(sys.executable)
        result = run_fault_command(command, "tiny")
    finally:
        server.shutdown()
    assert result.startswith("exit 0 ")
    report = json.loads(result.removeprefix("exit 0 "))
    assert (report["running"], report["exit"], marker.read_text().strip()) == (seen, 0, "tiny")
    assert len(answers) >= min(running_from, 2)  # it asked until the engine ran one (or the wait was over)
