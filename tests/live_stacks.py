"""The two real local stacks the live tests run against, started in the background as the session
begins (tests/conftest.py), while the tests before them run: each takes two to three minutes to
start, most of it the engines loading, and CI runs on two cores within an hour. They start one
after the other, the gate's first (its tests run first): four engines loading at once beside the
Ansible converge left one of them silent for four minutes in CI. The fixtures that hand them to
tests (tests/gate/conftest.py, tests/local/conftest.py) wait for them; a session that never
needed one does not start it.

Each stack has a directory and ports of its own, so a developer's own stack keeps running. `make test` runs
tests/local and the rest as two sessions side by side (tests/lanes.py), each starting the stack it needs: the start
lock keeps their engines loading one stack at a time across sessions too."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tenantry.local import stack as local
from tenantry.local.health import LocalStackError
from tenantry.local.layout import DEFAULT_DIR, Layout, engine_process, gateway_process
from tenantry.local.stack import UpResult
from tenantry.local.supervisor import crashes

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LiveStack:
    name: str
    spec: Path
    root: Path
    port_base: int
    log_requests: bool
    """The engines log every request body they parsed: what the tests of tests/local read."""
    tests: Path
    """The folder whose tests use it."""

    def layout(self) -> Layout:
        return Layout.from_environment(self.root, self.port_base)


GATE = LiveStack("gate", ROOT / "stacks" / "local.yaml", DEFAULT_DIR / "gate-stack",
                 int(os.environ.get("TENANTRY_GATE_TEST_PORT_BASE", "19500")), False, ROOT / "tests" / "gate")
TESTS = LiveStack("tests", ROOT / "tests" / "local" / "stack.yaml",
                  Path(os.environ.get("TENANTRY_TEST_DIR", DEFAULT_DIR / "test-stack")),
                  int(os.environ.get("TENANTRY_TEST_PORT_BASE", "19100")), True, ROOT / "tests" / "local")
STACKS = (GATE, TESTS)

START_LOCK = DEFAULT_DIR / "stack-start.lock"
"""Held while a stack starts, by every session: one stack loads its engines at a time."""

_starting: dict[str, Future] = {}
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-stack")  # one start at a time


def _up(stack: LiveStack) -> UpResult:
    """A fresh stack: whatever an earlier session left in its directory is removed first."""
    layout = stack.layout()
    START_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with START_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        local.down(layout, purge=True, progress=lambda _: None)
        lines: list[str] = []
        try:
            return local.up(str(stack.spec), layout, progress=lines.append, log_requests=stack.log_requests)
        except LocalStackError as error:
            local.down(layout, progress=lines.append)
            raise LocalStackError(f"the {stack.name} stack did not start: {error}\n" + "\n".join(lines)) from None


def start(stack: LiveStack) -> None:
    if stack.name not in _starting:
        _starting[stack.name] = _pool.submit(_up, stack)


def started() -> None:
    """Wait until every stack the session started serves, or failed to start (the failure is its tests')."""
    for future in list(_starting.values()):
        future.exception()


def needed(items, stack: LiveStack) -> bool:
    return any(Path(item.path).is_relative_to(stack.tests) for item in items)


def up(stack: LiveStack) -> UpResult:
    """The stack once it serves (started now if the session did not start it); a failed start raises
    LocalStackError with its progress lines."""
    start(stack)
    return _starting[stack.name].result()


def down(stack: LiveStack, keep_logs: bool = False) -> list[int]:
    """Stop the stack and remove its directory, unless its logs are kept for a failed session to be
    read (the next session removes them); the PIDs that had to be killed."""
    _starting.pop(stack.name, None)
    return local.down(stack.layout(), purge=not keep_logs, progress=lambda _: None)


def down_any_left() -> None:
    """At the session's end: stacks started for tests that never ran (deselected, interrupted)."""
    for name, future in list(_starting.items()):
        future.exception()  # wait for a start under way
        down(next(s for s in STACKS if s.name == name))


Run = TypeVar("Run")


def gate_run_failing_on_a_crash(stack: LiveStack, run: Callable[[], tuple[Run, str, Path]]) -> Run:
    """`run()` runs `tenantry gate` once and gives (its result, its output, its --out folder). A run during
    which a process of the stack, or a side gateway of --side-by-side (the gate says so), died of a signal the
    scenario did not send fails the test, naming the crash, whatever the run's verdict: a crash is never run
    again into a pass (docs/decisions.md: A crash during a gate test fails it). The stack is made whole first
    (supervisord gives up on a process that dies again while starting), so the tests after it run on it."""
    layout = stack.layout()
    before = crashes(layout)
    result, output, out = run()
    died = [line for line in crashes(layout)[len(before):] if not _killed_by_the_run(line, out)]
    died += [line for line in output.splitlines() if " died of signal " in line]
    if died:
        local.up(str(stack.spec), layout, progress=lambda _: None, log_requests=stack.log_requests)
        raise AssertionError(f"a process of the {stack.name} stack crashed during the gate run: {died}\n{output}")
    return result


def _killed_by_the_run(crash: str, out: Path) -> bool:
    """A SIGKILL supervisord logged for a program the scenario killed on purpose (kill-engine,
    kill-gateway in the run's actions): the fault under test, not a crash. (A stop-engine's escalation to
    SIGKILL is logged as a stop, which crashes() leaves out.)"""
    programs = {"kill-engine": engine_process, "kill-gateway": lambda replica: gateway_process(int(replica))}
    for verdict in out.rglob("verdict.json"):
        for action in json.loads(verdict.read_text())["actions"]:
            if action.get("kind") in programs:
                program = programs[action["kind"]](action["action"].split()[-1])
                if f"{program} (terminated by SIGKILL" in crash:
                    return True
    return False
