"""A mid-stream fault's command, run from a process of its own once the engine itself reports a request
running (vLLM's `vllm:num_requests_running` on its /metrics), so that the fault lands while the engine
generates, whatever the load generator is doing. On a starved machine the generator's event loop stalls for
seconds (its run's actions record each stall): a kill it ran itself, right after seeing a stream start,
landed 2.8 s later, after that stream's 1,648 tokens had all been generated (a gate run, 2026-12-04).

    python -m tenantry.gate.fault_agent --metrics URL [--metrics URL ...] --engine NAME --wait SECONDS
        [--freeze-group-of COMMAND] -- COMMAND...

With --freeze-group-of (a command printing the PID that leads the engine's process group, run before the wait),
the agent stops that group itself (SIGSTOP, no process to start) the moment the engine reports a request running,
and only then runs the fault's command: the stream cannot end while the command starts. Even a process started
from the agent, a shell and pgrep, took 3.3 s on a machine short of memory, and the gate's 5 s stream ended whole
before its kill (a clean clone's make test, 2026-12-06). The group is continued after the command, in case it
did not kill it.

Prints one JSON line: how long it waited, what the engine reported running, whether it froze the engine, and the
command's exit code and output. Runs the command anyway when the wait is over (the check then reports no stream
cut)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tenantry.gate.engine_load import gauge
from tenantry.gate.scenario_model import MID_STREAM_WAIT_SECONDS

POLL_SECONDS = 0.02
COMMAND_SECONDS = 60
ENGINE_GROUP = "engine-group"
"""A target's command printing the PID that leads an engine's process group ({engine} placeholder), where it has
one (the local stack, tenantry/local/supervisor.py): a mid-stream kill-engine then freezes the engine the moment
it runs the gate's stream, and kills it frozen."""


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
    parser.add_argument("--freeze-group-of", help="a command printing the PID leading the engine's process group")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    group = leader(args.freeze_group_of) if args.freeze_group_of else None
    start = time.monotonic()
    seen = running(args.metrics, args.engine)
    while seen < 1 and time.monotonic() < start + args.wait:
        time.sleep(POLL_SECONDS)
        seen = running(args.metrics, args.engine)
    waited = time.monotonic() - start
    stop_sent = seen >= 1 and group is not None and signal_group(group, signal.SIGSTOP)
    frozen = stop_sent and group_stopped(group)
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=COMMAND_SECONDS)
        outcome = {"exit": done.returncode, "output": (done.stdout + done.stderr).strip()[:200]}
    except subprocess.TimeoutExpired:
        outcome = {"exit": None, "output": f"timed out after {COMMAND_SECONDS} s"}
    finally:
        if stop_sent:
            signal_group(group, signal.SIGCONT)  # a group the command killed is gone: nothing to continue
    print(json.dumps({"waited": round(waited, 3), "running": seen, "frozen": frozen, **outcome}))
    return 0


def leader(command: str) -> int | None:
    """The PID the command prints, when it names a process group other than init's or none."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, check=False, timeout=COMMAND_SECONDS)
    first = done.stdout.split()[:1]
    return int(first[0]) if first and first[0].isdigit() and int(first[0]) > 1 else None


STOPPED_WITHIN_SECONDS = 2.0
"""The longest the agent waits for the frozen group to be stopped before it runs the command anyway."""


def group_stopped(group: int, seconds: float = STOPPED_WITHIN_SECONDS) -> bool:
    """Whether every process of the group reports itself stopped (state T in /proc/<pid>/stat), asked until it does
    or `seconds` pass. SIGSTOP is delivered asynchronously: a command started right after sending it once read the
    engine still running (a fresh clone's make test, tests/unit/test_fault_agent.py)."""
    deadline = time.monotonic() + seconds
    while True:
        states = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
            except (OSError, IndexError):
                continue
            if fields[2] == str(group):
                states.append(fields[0])
        stopped = bool(states) and all(state in ("T", "t") for state in states)
        if stopped or time.monotonic() > deadline:
            return stopped
        time.sleep(POLL_SECONDS / 4)


def signal_group(group: int, sent: signal.Signals) -> bool:
    try:
        os.killpg(group, sent)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def agent_command(kind: str, commands: dict[str, str], metrics: list[str], engine: str,
                  wait: float = MID_STREAM_WAIT_SECONDS) -> str:
    """The fault's command of the target (placeholders and all) run by this agent; for a kill, with the target's
    ENGINE_GROUP command the agent freezes the engine first (a stop is never frozen: its SIGTERM would wait for
    the SIGCONT)."""
    urls = " ".join(f"--metrics {shlex.quote(url)}" for url in metrics)
    agent = f"{shlex.quote(sys.executable)} -m tenantry.gate.fault_agent {urls} --engine {engine} --wait {wait:g}"
    if kind == "kill-engine" and commands.get(ENGINE_GROUP):
        agent += f" --freeze-group-of {shlex.quote(commands[ENGINE_GROUP])}"
    return f"{agent} -- {commands[kind]}"


if __name__ == "__main__":
    sys.exit(main())

