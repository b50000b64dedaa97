"""How the local stack tells a process is up: a port that answers, an HTTP
health URL, a live PID; and the error every local command reports."""

from __future__ import annotations

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
    tail = ""
    if log and log.exists():
        tail = "\n  last lines of " + str(log) + ":\n" + "\n".join(
            "    " + line for line in log.read_text(errors="replace").splitlines()[-15:])
    raise LocalStackError(f"{what} did not become healthy within {seconds:.0f} s{tail}")


def tree_resident_mib(pid: int) -> float:
    """Resident memory of a process and its descendants (vLLM's engine core, LiteLLM's Prisma
    bridge), for the benchmarks."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except (FileNotFoundError, StopIteration, ProcessLookupError):
            continue
    return total / 1024


def process_alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, waiting to be reaped by
    an init that may never do it in a container) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
