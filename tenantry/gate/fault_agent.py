"""A mid-stream fault's command, run from a process of its own once the engine itself reports a request
running (vLLM's `vllm:num_requests_running` on its /metrics), so that the fault lands while the engine
generates, whatever the load generator is doing. On a starved machine the generator's event loop stalls for
seconds (its run's actions record each stall): a kill it ran itself, right after seeing a stream start,
landed 2.8 s later, after that stream's 1,648 tokens had all been generated (a gate run, 2026-12-04).

    python -m tenantry.gate.fault_agent --metrics URL [--metrics URL ...] --engine NAME --wait SECONDS -- COMMAND...

Prints one JSON line: how long it waited, what the engine reported running, and the command's exit code
and output. Runs the command anyway when the wait is over (the check then reports no stream cut)."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
import urllib.request

from tenantry.gate.engine_load import gauge

POLL_SECONDS = 0.02
COMMAND_SECONDS = 60


def running(urls: list[str], engine: str) -> float:
    """Requests the engine's replicas report running; 0 when one does not answer."""
    try:
        return sum(gauge(urllib.request.urlopen(url, timeout=1).read().decode(), "vllm:num_requests_running", engine)
                   for url in urls)
    except OSError:
        return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", action="append", required=True, help="a replica's /metrics URL")
    parser.add_argument("--engine", required=True)
    parser.add_argument("--wait", type=float, required=True, help="the longest to wait for a request running")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.monotonic()
    seen = running(args.metrics, args.engine)
    while seen < 1 and time.monotonic() < start + args.wait:
        time.sleep(POLL_SECONDS)
        seen = running(args.metrics, args.engine)
    waited = time.monotonic() - start
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=COMMAND_SECONDS)
        outcome = {"exit": done.returncode, "output": (done.stdout + done.stderr).strip()[:200]}
    except subprocess.TimeoutExpired:
        outcome = {"exit": None, "output": f"timed out after {COMMAND_SECONDS} s"}
    print(json.dumps({"waited": round(waited, 3), "running": seen, **outcome}))
    return 0


def agent_command(command: str, metrics: list[str], engine: str, wait: float) -> str:
    """`command` (a fault command of the target, placeholders and all) run by this agent."""
    urls = " ".join(f"--metrics {shlex.quote(url)}" for url in metrics)
    agent = f"{shlex.quote(sys.executable)} -m tenantry.gate.fault_agent {urls} --engine {engine} --wait {wait:g}"
    return f"{agent} -- {command}"


if __name__ == "__main__":
    sys.exit(main())

