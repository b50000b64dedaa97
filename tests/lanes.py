"""`make test`: the whole suite as two pytest sessions side by side, each on a stack of its own.

    lane "local"   tests/local, against the tests stack (tests/local/stack.yaml)
    lane "rest"    everything else: tests/unit, tests/manifests, tests/gate (against the gate stack), tests/ansible

The two live suites were built on separate stacks, directories and ports (tests/live_stacks.py), so nothing
orders them; run one after the other they took 27 of make test's 34-39 minutes on two cores (issue 33), most of it
waiting on engines, restarts, Prometheus and Alertmanager. Side by side, each runs under the other's load, which the
live tests must stand anyway (issue 33: stable on a loaded machine; they judge who was served, shed and refused,
and latency only as a ratio within a run). The stacks still load their engines one at a time, across the two
sessions too (live_stacks: the start lock).

Lane "rest" writes to the terminal as it runs; lane "local" to .local/test-lanes/local.log, printed whole when
both have ended, then each lane's exit code and wall time. The exit code is the first lane's that failed.
Arguments go to both sessions (`make test PYTEST_ARGS='-m "not slow"'`); arguments that name tests (a path, a
node ID) run one session with exactly them, as pytest would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".local" / "test-lanes"


@dataclass(frozen=True)
class Lane:
    name: str
    selection: tuple[str, ...]
    """What pytest is given to collect."""
    to_terminal: bool


LANES = (Lane("local", ("tests/local",), False),
         Lane("rest", ("tests", "--ignore=tests/local"), True))


def names_tests(args: list[str]) -> bool:
    """Whether the arguments choose tests themselves (a file, a folder, a node ID), not only options."""
    return any(not arg.startswith("-") and (Path(arg.split("::")[0]).exists() or "::" in arg) for arg in args)


def _pytest(args: list[str], **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=ROOT, **popen)


def run(args: list[str]) -> int:
    if names_tests(args):
        return _pytest(args).wait()
    LOGS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    running: dict[Lane, subprocess.Popen] = {}
    logs = {}
    for lane in LANES:
        if lane.to_terminal:
            running[lane] = _pytest([*lane.selection, *args])
        else:
            logs[lane] = (LOGS / f"{lane.name}.log").open("w")
            running[lane] = _pytest([*lane.selection, *args], stdout=logs[lane], stderr=subprocess.STDOUT)
    ended: dict[Lane, tuple[int, float]] = {}
    try:
        while len(ended) < len(running):
            for lane, process in running.items():
                if lane not in ended and process.poll() is not None:
                    ended[lane] = (process.returncode, time.monotonic() - began)
            time.sleep(1)
    finally:
        for lane, process in running.items():
            if process.poll() is None:  # interrupted: each session stops its own stacks and nodes
                process.send_signal(signal.SIGINT)
                process.wait()
        for log in logs.values():
            log.close()
    for lane in logs:
        print(f"\n{'=' * 30} lane {lane.name}: {' '.join(lane.selection)} {'=' * 30}", flush=True)
        sys.stdout.write((LOGS / f"{lane.name}.log").read_text())
    print(f"\n{'=' * 30} make test: lanes side by side {'=' * 30}")
    for lane, (code, seconds) in ended.items():
        print(f"lane {lane.name:<6} {' '.join(lane.selection):<32} exit {code}  {seconds:7.0f} s  {seconds / 60:5.1f} min")
    print(f"make test                                        {time.monotonic() - began:7.0f} s", flush=True)
    return next((code for code, _ in ended.values() if code != 0), 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(run(sys.argv[1:]))
