"""supervisord, which starts, stops, restarts and logs every process of the
local stack: talking to it, and the engine stop/start the tests and the gate use."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from collections.abc import Callable

from tenantry.local.health import (LocalStackError, http_ok, log_tail, process_alive, stuck_process_report,
                                    wait_healthy)
from tenantry.local.layout import HOST, Layout, engine_process
from tenantry.plan.model import Plan

SUPERVISORCTL = Path(sys.executable).parent / "supervisorctl"
SUPERVISORD = Path(sys.executable).parent / "supervisord"

ENGINE_START_SECONDS = 240
"""How long a local engine may take to serve before it is restarted, once, as a Kubernetes startup
probe would: about 35 s on an idle two-core machine, several times that beside another stack's
engines and an Ansible converge (docs/decisions.md: A local engine that does not start in time is
restarted once, with its stacks logged)."""


def supervisorctl(layout: Layout, *args: str, check: bool = True) -> str:
    result = subprocess.run([str(SUPERVISORCTL), "-c", str(layout.supervisor_conf), *args],
                            capture_output=True, text=True, check=False, timeout=120)
    if check and result.returncode not in (0, 3):  # 3: some program not running, reported in the output
        raise LocalStackError(f"supervisorctl {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result.stdout


def crashes(layout: Layout) -> list[str]:
    """Processes of the stack that died of a signal nobody asked supervisord for, as it logged them (the
    gate's tests and benchmarks/gateway_soak.py count LiteLLM's crashes by them). A stop supervisord was
    asked for (the gate's stop-engine, `tenantry local down`) is logged "stopped: NAME (terminated by
    SIGKILL)" when the program outlived its stop wait: a stop, not a crash (supervisor's
    Subprocess.finish writes "stopped:" only for a stop request, "exited:" otherwise)."""
    log = layout.logs / "supervisord.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if "exited: " in line and "terminated by SIG" in line]


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
    """The gate's faults on this stack (tenantry.gate.scenario_model.FAULTS), as shell commands with an
    {engine} or {replica} placeholder. A killed process is started again by supervisord, as a
    crashed one would be; a stopped one waits for its start command (or the gate's restore)."""
    ctl = f"{shlex.quote(str(SUPERVISORCTL))} -c {shlex.quote(str(layout.supervisor_conf))}"
    return {
        "stop-engine": f"{ctl} stop {engine_process('{engine}')}",
        "kill-engine": _kill_engine(layout),
        "engine-group": engine_leader(layout),  # the mid-stream kill's freeze (tenantry.gate.fault_agent)
        "kill-gateway": _kill_process_group(ctl, "gateway-{replica}"),
        "stop-postgres": f"{ctl} stop postgres",
        "start-postgres": f"{ctl} start postgres",
        "stop-redis": f"{ctl} stop redis",
        "start-redis": f"{ctl} start redis",
    }


def _kill_process_group(ctl: str, program: str) -> str:
    """SIGKILL to every process of a program, as a container's processes die together: supervisord
    starts each program in a process group of its own, numbered by its PID. Killing the PID alone
    (`supervisorctl signal KILL`) left vLLM's engine core and worker running without their API
    server, 2.9 GB and a tenth of a core each, one pair per kill. A program not running has PID 0,
    which `kill` would read as the caller's own group: nothing is sent then."""
    return _kill_group(f"{ctl} pid {program}")


def _kill_group(find_pid: str) -> str:
    """SIGKILL to the process group led by the PID `find_pid` prints, never to group 0 (not running)."""
    script = f'pid=$({find_pid}) && [ "$pid" -gt 1 ] && kill -KILL "-$pid"'
    return f"sh -c {shlex.quote(script)}"


def _kill_engine(layout: Layout) -> str:
    """As _kill_process_group, but the engine is found among supervisord's children by the model it serves
    (`vllm serve ... --served-model-name NAME ...`, the group's leader) with pgrep, not asked of
    supervisorctl: under load supervisorctl took 3.5 s to answer, and the stream a mid-stream kill had
    waited for ended before the kill landed (a gate run, 2026-12-03)."""
    return _kill_group(engine_leader(layout))


def engine_leader(layout: Layout) -> str:
    """A shell command printing the PID that leads the engine's process group (with an {engine} placeholder):
    the one `vllm serve ... --served-model-name NAME` among this stack's supervisord's children only, since
    another stack on the machine serves models of the same names. The mid-stream agent freezes that group before
    the kill (tenantry/gate/fault_agent.py)."""
    supervisord = f'"$(cat {shlex.quote(str(layout.supervisor_pid))})"'
    return f'pgrep -o -P {supervisord} -f -- "--served-model-name {{engine}} "'


def stop_engine(layout: Layout, engine: str) -> None:
    supervisorctl(layout, "stop", engine_process(engine))


def program_pid(layout: Layout, name: str) -> int | None:
    match = re.search(r"\bpid (\d+),", supervisorctl(layout, "status", name, check=False))
    return int(match.group(1)) if match else None


def wait_for_engine(layout: Layout, engine: str, port: int, step: Callable[[str], None] = lambda _: None,
                    seconds: float = ENGINE_START_SECONDS) -> None:
    """Wait until the engine serves; one that has not within `seconds` has what its processes are
    doing recorded (their Python stacks into its log) and is restarted once. An engine that fails
    twice raises LocalStackError with both records and the end of its log."""
    name = engine_process(engine)
    reports = []
    for attempt in (1, 2):
        try:
            wait_healthy(f"engine {engine}", lambda: http_ok(f"http://{HOST}:{port}/health"), seconds)
            return
        except LocalStackError:
            pid = program_pid(layout, name)
            reports.append(stuck_process_report(pid) if pid else "not running")
        if attempt == 1:
            step(f"engine {engine} did not serve within {seconds:.0f} s ({reports[0]}; its Python "
                 f"stacks are in {layout.logs / (name + '.log')}): restarting it once, as a startup probe would")
            supervisorctl(layout, "restart", name)
    raise LocalStackError(
        f"engine {engine} did not become healthy within {seconds:.0f} s, twice (restarted once); "
        f"first: {reports[0]}; then: {reports[1]}{log_tail(layout.logs / f'{name}.log', 60)}")


def restart_engine_if_stopped(layout: Layout, plan: Plan, engine: str) -> bool:
    """Start an engine supervisor is not running (a test or the gate stopped it), or let one it is
    starting again (a killed engine) load, and wait until it is healthy; True when it was not."""
    port = layout.ports(plan).engines[engine]
    if http_ok(f"http://{HOST}:{port}/health"):
        return False
    if not any(state in supervisorctl(layout, "status", engine_process(engine), check=False)
               for state in ("RUNNING", "STARTING", "BACKOFF")):
        supervisorctl(layout, "start", engine_process(engine), check=False)
    wait_for_engine(layout, engine, port)
    return True
