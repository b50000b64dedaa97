"""`tenantry local up | status | down | logs`: the local stack's life cycle.

supervisord (from PyPI, configured from the Plan) starts, stops, restarts
and logs every process; this module prepares what they need (models,
database, secrets, configs), waits for health, and reconciles the tenants
with the same code the Kubernetes Job runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tenantry.configs.teams import desired_teams
from tenantry.gateway.reconciler import REVOKED_HINT, GatewayRefused, LiteLLM, SpecConflict, reconcile
from tenantry.configs.litellm import READINESS_PATH
from tenantry.local import credentials, models, postgres, services
from tenantry.local.alert_receiver import HEALTH_PATH as RECEIVER_HEALTH_PATH
from tenantry.local.health import LocalStackError, http_ok, port_open, process_alive, wait_healthy
from tenantry.local.layout import HOST, VLLM_VENV, Layout, Ports, State, engine_process, gateway_process
from tenantry.local.supervisor import (SUPERVISORD, start_supervisor, supervisor_running, supervisorctl,
                                       wait_for_engine)
from tenantry.plan.model import Plan
from tenantry.stacks import plan_stack, require_fit, stack_path

if TYPE_CHECKING:
    from tenantry.local.prisma import BridgePaths

Progress = Callable[[str], None]

MONITORING_HEALTH = {"prometheus": "/-/ready", "alertmanager": "/-/ready", "alert-receiver": RECEIVER_HEALTH_PATH}
"""The monitoring processes, each with the path on its port that answers 200 once it serves."""


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    state: str
    pid: int | None
    port: int | None
    healthy: bool


# --- preflight -------------------------------------------------------------------------------


def preflight(plan: Plan, layout: Layout, ports: Ports) -> list[str]:
    problems = []
    for program, (path, package) in services.SYSTEM_PROGRAMS.items():
        if not path.exists():
            problems.append(f"{program} is missing ({path}): run `make local`, or apt-get install {package}")
    if not (VLLM_VENV / "bin" / "python").exists():
        problems.append(f"the engines' environment {VLLM_VENV} is missing: run `make local`")
    if not SUPERVISORD.exists():
        problems.append("supervisord is missing from the virtual environment: run `make local`")
    if supervisor_running(layout) is None:
        for what, port in ports.by_process().items():
            if port_open(port):
                problems.append(f"port {port} ({what}) is already in use on {HOST}: stop what listens there or "
                                "choose other ports with --port-base (or TENANTRY_LOCAL_PORT_BASE)")
    return problems


# --- up --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpResult:
    plan: Plan
    ports: Ports
    gateway_url: str
    gateway_urls: list[str]
    keys: dict[str, str]
    seconds: float
    changes: int


def up(stack: str, layout: Layout, progress: Progress = print, log_requests: bool = False) -> UpResult:
    """Start (or update) the stack. `log_requests` makes the engines log every
    request body as they parsed it: what the tests read to see what reached vLLM."""
    started = time.monotonic()

    def step(message: str) -> None:
        progress(f"[{time.monotonic() - started:5.1f} s] {message}")

    path = stack_path(stack)
    plan = require_fit(plan_stack(path))
    ports = layout.ports(plan)
    previous = _check_can_start(plan, layout, ports)
    run_as = postgres.run_as()
    step(f"stack {plan.stack}: {len(plan.engines)} engines, {len(plan.tenants)} tenants, ports from {layout.port_base}")
    built = {}
    for engine in plan.engines:
        built[engine.name] = models.ensure_built(engine, layout.models)
        step(f"model for engine {engine.name} ready ({built[engine.name].model_dir.parent.name})")
    postgres.init_data(layout, run_as)
    prisma_paths, gateway_env = _write_configs(plan, layout, ports, built, run_as, log_requests)
    digest = _gateway_digest(layout, gateway_env)
    # Resolved: the gate's fault commands (tenantry/local/budget.py) read it from another directory.
    State(plan.stack, str(path.resolve()), layout.port_base, ports.by_process(), digest).save(layout)
    _start_or_update_supervisor(plan, layout, step)
    _prepare_database(layout, ports, prisma_paths, gateway_env["DATABASE_URL"], step)
    wait_healthy("Redis", lambda: port_open(ports.redis), 30, layout.logs / "redis.log")
    _start_gateways(layout, ports, restart=previous is None or previous.gateway_digest != digest, step=step)
    gateway_urls = _wait_until_serving(plan, layout, ports, step)
    keys = credentials.tenant_keys(layout, plan)
    try:
        actions = reconcile(LiteLLM(gateway_urls[0], credentials.master_key(layout)), desired_teams(plan), keys)
    except SpecConflict as error:
        raise LocalStackError(f"the tenants could not be registered with the gateway: {error}") from None
    except GatewayRefused as error:
        raise LocalStackError(f"the tenants could not be registered with the gateway: {error}. The keys are in "
                              f"{layout.keys_file}; to start afresh, `tenantry local down --purge` (deletes the "
                              "stack's database too)") from None
    revoked = [a.tenant for a in actions if a.verb == "keep-revoked"]
    changes = len(actions) - len(revoked)
    step(f"tenants reconciled: {changes} changes" + "".join(f"; {t}'s key is {REVOKED_HINT}" for t in revoked))
    return UpResult(plan, ports, gateway_urls[0], gateway_urls, keys, time.monotonic() - started, changes)


def _check_can_start(plan: Plan, layout: Layout, ports: Ports) -> State | None:
    """The state of a stack already up from this directory (None for a first start),
    once nothing stands in the way; the stack's folders are made."""
    problems = preflight(plan, layout, ports)
    if problems:
        raise LocalStackError("the local stack cannot start:\n" + "\n".join(f"  - {p}" for p in problems))
    previous = State.load(layout)
    if previous and supervisor_running(layout) and previous.port_base != layout.port_base:
        raise LocalStackError(f"a stack already runs from {layout.root} on ports from {previous.port_base}; "
                              "run `tenantry local down` first")
    for folder in (layout.root, layout.logs, layout.run):
        folder.mkdir(parents=True, exist_ok=True)
    return previous


def _write_configs(plan: Plan, layout: Layout, ports: Ports, built: dict[str, models.BuiltModel],
                   run_as: str | None, log_requests: bool) -> tuple[BridgePaths, dict[str, str]]:
    """Every process's configuration, and the Prisma bridge the gateways run with;
    returns the bridge's paths and the gateways' environment."""
    from tenantry.local import prisma

    services.redis_conf(layout, ports, credentials.redis_password(layout))
    credentials.master_key(layout)  # made now: Prometheus reads it from its file
    services.prometheus_yml(plan, layout, ports, layout.secrets / "master-key")
    services.alertmanager_yml(plan, layout, ports)
    services.gateway_files(plan, layout, ports)
    try:
        prisma_paths = prisma.install(layout.root / "prisma")
    except prisma.PrismaBridgeError as error:
        raise LocalStackError(str(error)) from None
    gateway_env = credentials.gateway_environment(layout, ports, prisma_paths)
    services.supervisor_conf(plan, layout, ports, built, gateway_env, run_as, log_requests)
    return prisma_paths, gateway_env


def _gateway_digest(layout: Layout, gateway_env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(gateway_env, sort_keys=True).encode() + b"".join(
        (layout.gateway / f).read_bytes() for f in sorted(os.listdir(layout.gateway)))).hexdigest()


def _start_or_update_supervisor(plan: Plan, layout: Layout, step: Progress) -> None:
    if supervisor_running(layout):
        step("supervisor already running: applying changed configuration")
        supervisorctl(layout, "reread")
        supervisorctl(layout, "update")
        supervisorctl(layout, "start", "postgres", "redis", *MONITORING_HEALTH,
                      *(engine_process(e.name) for e in plan.engines), check=False)
        # Their command lines did not change, their files may have (rules, routes): both reread on HUP.
        supervisorctl(layout, "signal", "HUP", "prometheus", "alertmanager", check=False)
    else:
        start_supervisor(layout)
        step("supervisor started: PostgreSQL, Redis, Prometheus, Alertmanager and the engines are starting")


def _prepare_database(layout: Layout, ports: Ports, prisma_paths: BridgePaths, database_url: str,
                      step: Progress) -> None:
    from tenantry.local import prisma

    wait_healthy("PostgreSQL", lambda: postgres.accepts_connections(layout.postgres_home, ports.postgres), 60, layout.logs / "postgres.log")
    postgres.create_database(layout, ports, credentials.postgres_password(layout))
    step("PostgreSQL ready")
    try:
        prisma.generate_client(prisma_paths)
        prisma.apply_migrations(database_url)
    except prisma.PrismaBridgeError as error:
        raise LocalStackError(str(error)) from None
    step("LiteLLM's database schema applied")


def _start_gateways(layout: Layout, ports: Ports, restart: bool, step: Progress) -> None:
    """Start the gateways (supervisord holds them until the database is migrated);
    restart running ones when their configuration changed."""
    for name in (gateway_process(i) for i in range(len(ports.gateways))):
        if "RUNNING" not in supervisorctl(layout, "status", name, check=False):
            supervisorctl(layout, "start", name)
        elif restart:
            step(f"gateway configuration changed: restarting {name}")
            supervisorctl(layout, "restart", name)


def _wait_until_serving(plan: Plan, layout: Layout, ports: Ports, step: Progress) -> list[str]:
    """Wait for every engine, gateway and monitoring process to be healthy; returns the gateways' URLs."""
    for engine in plan.engines:
        port = ports.engines[engine.name]
        wait_for_engine(layout, engine.name, port, step)
        step(f"engine {engine.name} healthy on {HOST}:{port}")
    gateway_urls = [f"http://{HOST}:{port}" for port in ports.gateways]
    for replica, url in enumerate(gateway_urls):
        name = gateway_process(replica)
        wait_healthy(name, lambda u=url: http_ok(f"{u}{READINESS_PATH}"), 180, layout.logs / f"{name}.log")
        step(f"{name} healthy on {url}")
    for name, path in MONITORING_HEALTH.items():
        url = f"http://{HOST}:{ports.by_process()[name]}{path}"
        wait_healthy(name, lambda u=url: http_ok(u), 60, layout.logs / f"{name}.log")
    step(f"Prometheus, Alertmanager and the alert receiver healthy: notifications land in {layout.alerts_received}")
    return gateway_urls


# --- status, down, logs ----------------------------------------------------------------------


def status(layout: Layout) -> list[ProcessStatus]:
    state = State.load(layout)
    if state is None or supervisor_running(layout) is None:
        return []
    out = supervisorctl(layout, "status", check=False)
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, program_state = parts[0], parts[1]
        pid = int(parts[3].rstrip(",")) if len(parts) > 3 and parts[2] == "pid" else None
        port = state.ports.get(name)
        rows.append(ProcessStatus(name, program_state, pid, port, _healthy(name, port)))
    return rows


def _healthy(name: str, port: int | None) -> bool:
    if port is None:
        return False
    if name.startswith("engine-"):
        return http_ok(f"http://{HOST}:{port}/health")
    if name.startswith("gateway"):
        return http_ok(f"http://{HOST}:{port}{READINESS_PATH}")
    if name in MONITORING_HEALTH:
        return http_ok(f"http://{HOST}:{port}{MONITORING_HEALTH[name]}")
    return port_open(port)


def down(layout: Layout, purge: bool = False, progress: Progress = print) -> list[int]:
    """Stop everything supervisord started, by PID; returns PIDs that had to be killed."""
    killed: list[int] = []
    supervisor = supervisor_running(layout)
    if supervisor is not None:
        pids = [s.pid for s in status(layout) if s.pid]
        supervisorctl(layout, "shutdown", check=False)
        # supervisord removes its pidfile a moment before it exits: wait on the processes themselves.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(process_alive(p) for p in [*pids, supervisor]):
            time.sleep(0.5)
        for pid in [*pids, supervisor]:
            if process_alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)  # still alive after supervisor's own stop: ours, force it
                    killed.append(pid)
        progress(f"stopped {len(pids)} processes")
    else:
        progress("nothing running")
    if purge:
        for folder in (layout.postgres_home, layout.root):
            if folder.exists():
                kept = _remove_except(folder, layout.models)
                progress(f"removed {folder}" + (f" (kept the model cache {layout.models})" if kept else ""))
    return killed


def _remove_except(folder: Path, keep: Path) -> bool:
    """Delete `folder`, except `keep` when it lies inside (the default model cache lives in the
    default stack directory, and is every stack's); True when something was kept."""
    if not keep.is_relative_to(folder) or keep == folder or not keep.exists():
        shutil.rmtree(folder)
        return False
    for entry in folder.iterdir():
        if keep.is_relative_to(entry):
            if entry != keep:
                _remove_except(entry, keep)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return True


def logs(layout: Layout, name: str, lines: int = 50) -> str:
    path = layout.logs / f"{name}.log"
    if not path.exists():
        known = sorted(p.stem for p in layout.logs.glob("*.log")) if layout.logs.exists() else []
        raise LocalStackError(f"no log named {name}; known: {', '.join(known) or 'none (is the stack up?)'}")
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
