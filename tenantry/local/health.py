"""How the local stack tells a process is up: a port that answers, an HTTP
health URL, a live PID; and the error every local command reports."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tenantry.local.layout import HOST


class LocalStackError(Exception):
    """A problem the user can fix; the message says how."""


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def http_ok(url: str, headers: dict[str, str] | None = None, timeout: float = 3) -> bool:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own 127.0.0.1 URLs
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(what: str, check: Callable[[], bool], seconds: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    raise LocalStackError(f"{what} did not become healthy within {seconds:.0f} s{log_tail(log)}")


def log_tail(log: Path | None, lines: int = 15) -> str:
    """The end of a process's log, indented, for an error that says it did not start."""
    if not log or not log.exists():
        return ""
    return "\n  last lines of " + str(log) + ":\n" + "\n".join(
        "    " + line for line in log.read_text(errors="replace").splitlines()[-lines:])


def process_tree(pid: int) -> list[int]:
    """A process and its live descendants (vLLM's engine core and worker, LiteLLM's Prisma bridge)."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        tree.append(current)
    return tree


def _proc_field(path: str, field: str) -> str:
    """A "Field: value" line of /proc/<pid>/status or /proc/meminfo (ValueError when it has none)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(f"{field}:"):
            return line.split()[1]
    raise ValueError(f"{path} has no {field}")


def _catches(pid: int, signum: int) -> bool:
    return bool(int(_proc_field(f"/proc/{pid}/status", "SigCgt"), 16) & (1 << (signum - 1)))


def tree_resident_mib(pid: int) -> float:
    """Resident memory of a process and its descendants, for the benchmarks."""
    total = 0
    for member in process_tree(pid):
        try:
            total += int(_proc_field(f"/proc/{member}/status", "VmRSS"))
        except (FileNotFoundError, ValueError, ProcessLookupError):
            continue
    return total / 1024


def stuck_process_report(pid: int, settle: float = 2.0) -> str:
    """What a process that did not become healthy is doing, for the error that says so: each member
    of its tree with its state and CPU seconds, and the machine's load and free memory (busy and
    starved, or idle and hung?). Python processes that registered faulthandler on SIGUSR1 (the
    local engines, tenantry/local/engine_site) print their stacks to their log, which the error's
    tail then shows."""
    ticks = os.sysconf("SC_CLK_TCK")
    members = []
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{member}/comm").read_text().strip()
            if _catches(member, signal.SIGUSR1):  # never sent to one it would kill
                os.kill(member, signal.SIGUSR1)
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        cpu_seconds = (int(fields[11]) + int(fields[12])) / ticks  # utime and stime, fields 14 and 15 of stat
        members.append(f"{member} {command} {fields[0]} {cpu_seconds:.0f} CPU-s")
    time.sleep(settle)  # the stacks reach the log
    load = Path("/proc/loadavg").read_text().split()[:3]
    available_gib = int(_proc_field("/proc/meminfo", "MemAvailable")) / 2**20
    return (f"processes: {', '.join(members) or 'none left'}; machine: load {' '.join(load)} on "
            f"{os.cpu_count()} cores, {available_gib:.1f} GiB available")


def process_alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, waiting to be reaped by
    an init that may never do it in a container) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
