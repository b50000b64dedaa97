"""supervisord, which starts, stops, restarts and logs every process of the
local stack: talking to it, and the engine stop/start the tests and the gate use."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from tenantry.local.health import LocalStackError, http_ok, process_alive, wait_healthy
from tenantry.local.layout import HOST, Layout, engine_process
from tenantry.plan.model import Plan

SUPERVISORCTL = Path(sys.executable).parent / "supervisorctl"
SUPERVISORD = Path(sys.executable).parent / "supervisord"


def supervisorctl(layout: Layout, *args: str, check: bool = True) -> str:
    result = subprocess.run([str(SUPERVISORCTL), "-c", str(layout.supervisor_conf), *args],
                            capture_output=True, text=True, check=False, timeout=120)
    if check and result.returncode not in (0, 3):  # 3: some program not running, reported in the output
        raise LocalStackError(f"supervisorctl {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result.stdout


def crashes(layout: Layout) -> list[str]:
    """Processes of the stack that died of a signal, as supervisord logged them (the gate's tests
    and benchmarks/gateway_soak.py count LiteLLM's crashes by them)."""
    log = layout.logs / "supervisord.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if "terminated by SIG" in line]


def supervisor_running(layout: Layout) -> int | None:
    try:
        pid = int(layout.supervisor_pid.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if process_alive(pid) else None


def start_supervisor(layout: Layout) -> None:
    result = subprocess.run([str(SUPERVISORD), "-c", str(layout.supervisor_conf)], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise LocalStackError(f"supervisord did not start: {result.stderr.strip() or result.stdout.strip()}")


def fault_commands(layout: Layout) -> dict[str, str]:
    """The gate's faults on this stack (tenantry.gate.scenarios.FAULTS), as shell commands with an
    {engine} or {replica} placeholder. A killed process is started again by supervisord, as a
    crashed one would be; a stopped one waits for its start command (or the gate's restore)."""
    ctl = f"{shlex.quote(str(SUPERVISORCTL))} -c {shlex.quote(str(layout.supervisor_conf))}"
    return {
        "stop-engine": f"{ctl} stop {engine_process('{engine}')}",
        "kill-engine": f"{ctl} signal KILL {engine_process('{engine}')}",
        "kill-gateway": f"{ctl} signal KILL gateway-{{replica}}",
        "stop-postgres": f"{ctl} stop postgres",
        "start-postgres": f"{ctl} start postgres",
        "stop-redis": f"{ctl} stop redis",
        "start-redis": f"{ctl} start redis",
    }


def stop_engine(layout: Layout, engine: str) -> None:
    supervisorctl(layout, "stop", engine_process(engine))


def restart_engine_if_stopped(layout: Layout, plan: Plan, engine: str, seconds: float = 240) -> bool:
    """Start an engine supervisor is not running (a test or the gate stopped it), or let one it is
    starting again (a killed engine) load, and wait until it is healthy; True when it was not."""
    port = layout.ports(plan).engines[engine]
    if http_ok(f"http://{HOST}:{port}/health"):
        return False
    if not any(state in supervisorctl(layout, "status", engine_process(engine), check=False)
               for state in ("RUNNING", "STARTING", "BACKOFF")):
        supervisorctl(layout, "start", engine_process(engine), check=False)
    wait_healthy(f"engine {engine}", lambda: http_ok(f"http://{HOST}:{port}/health"), seconds,
                 layout.logs / f"{engine_process(engine)}.log")
    return True
