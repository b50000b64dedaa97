"""`tenantry local up | status | down | logs`: the local stack's life cycle.

supervisord (from PyPI, configured from the Plan) starts, stops, restarts
and logs every process; this module prepares what they need (models,
database, secrets, configs), waits for health, and reconciles the tenants
with the same code the Kubernetes Job runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tenantry.gateway.reconciler import LiteLLM, reconcile
from tenantry.local import models, services
from tenantry.local.layout import HOST, POSTGRES_USER, VLLM_VENV, Layout, Ports, State
from tenantry.plan.model import Plan
from tenantry.configs.teams import desired_teams
from tenantry.stacks import plan_stack, require_fit, stack_path

if TYPE_CHECKING:
    from tenantry.local.prisma import BridgePaths

Progress = Callable[[str], None]
SHED_HEADER = "X-Tenantry-Shed"
"""The tenant-policy plugin's header on a 429 for capacity (its SHED_HEADER; the plugin
imports LiteLLM, which the local stack's commands do not load)."""
SUPERVISORCTL = Path(sys.executable).parent / "supervisorctl"
SUPERVISORD = Path(sys.executable).parent / "supervisord"


class LocalStackError(Exception):
    """A problem the user can fix; the message says how."""


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    state: str
    pid: int | None
    port: int | None
    healthy: bool


# --- small helpers ---------------------------------------------------------------------------


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def _http_ok(url: str, headers: dict[str, str] | None = None, timeout: float = 3) -> bool:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own 127.0.0.1 URLs
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _wait(what: str, check: Callable[[], bool], seconds: float, log: Path | None = None) -> None:
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


def _secret(layout: Layout, name: str, prefix: str = "") -> str:
    layout.secrets.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = layout.secrets / name
    if not path.exists():
        path.write_text(prefix + secrets.token_hex(24), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def gateway_environment(layout: Layout, ports: Ports, prisma_paths: BridgePaths) -> dict[str, str]:
    """What every LiteLLM process of the stack runs with: the stack's secrets,
    its database and Redis, the tenant-policy settings and the Prisma bridge."""
    from tenantry.local import prisma

    return {
        "LITELLM_MASTER_KEY": _secret(layout, "master-key", prefix="sk-"),
        "DATABASE_URL": f"postgresql://litellm:{_secret(layout, 'postgres-password')}@{HOST}:{ports.postgres}/litellm",
        "REDIS_HOST": HOST,
        "REDIS_PORT": str(ports.redis),
        "REDIS_PASSWORD": _secret(layout, "redis-password"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TENANTRY_POLICY_FILE": str(layout.gateway / "tenant-policy.json"),
        "HOME": str(layout.root),
        **prisma.environment(prisma_paths),
    }


def _run_as() -> str | None:
    """PostgreSQL refuses to run as root; as root, run it as the postgres user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_USER)
    except KeyError as missing:
        raise LocalStackError("running as root needs the `postgres` user (apt-get install postgresql)") from missing
    return POSTGRES_USER


def _supervisorctl(layout: Layout, *args: str, check: bool = True) -> str:
    result = subprocess.run([str(SUPERVISORCTL), "-c", str(layout.supervisor_conf), *args],
                            capture_output=True, text=True, check=False, timeout=120)
    if check and result.returncode not in (0, 3):  # 3: some program not running, reported in the output
        raise LocalStackError(f"supervisorctl {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result.stdout


def process_alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, waiting to be reaped by
    an init that may never do it in a container) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def supervisor_running(layout: Layout) -> int | None:
    try:
        pid = int(layout.supervisor_pid.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if process_alive(pid) else None


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
        named = {**{f"gateway-{i}": p for i, p in enumerate(ports.gateways)}, "postgres": ports.postgres, "redis": ports.redis,
                 "prometheus": ports.prometheus, **{f"engine {n}": p for n, p in ports.engines.items()}}
        for what, port in named.items():
            if port_open(port):
                problems.append(f"port {port} ({what}) is already in use on {HOST}: stop what listens there or "
                                "choose other ports with --port-base (or TENANTRY_LOCAL_PORT_BASE)")
    return problems


# --- up --------------------------------------------------------------------------------------


def _init_postgres(layout: Layout, run_as: str | None) -> None:
    home, data = layout.postgres_home, layout.postgres_data
    if (data / "PG_VERSION").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    for folder in (home, data):
        folder.chmod(0o700)
    if run_as:  # from the user's home down, every folder is the user's, whatever the umask made
        for folder in (home.parent, home, data):
            shutil.chown(folder, run_as, run_as)
    if not home.is_relative_to(layout.root):  # say whose it is, for whoever finds it there
        (home / "stack-directory").write_text(f"{layout.root}\n", encoding="utf-8")
    result = subprocess.run(
        [str(services.POSTGRES_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
         "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-instructions"],
        capture_output=True, text=True, check=False, user=run_as, cwd=home,
    )
    if result.returncode != 0:
        raise LocalStackError(f"initdb failed: {result.stderr.strip()}")


def _create_database(layout: Layout, ports: Ports, password: str) -> None:
    """The litellm role and database, created once; the password is reset each
    time so the secret file is always the truth."""
    sql = (
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'litellm') THEN "
        f"CREATE ROLE litellm LOGIN PASSWORD '{password}'; ELSE ALTER ROLE litellm PASSWORD '{password}'; END IF; END $$;"
    )
    base = ["/usr/bin/psql", "-h", str(layout.postgres_home), "-p", str(ports.postgres), "-U", "postgres",
            "-v", "ON_ERROR_STOP=1"]
    for command in ([*base, "-c", sql],
                    [*base, "-tAc", "SELECT 1 FROM pg_database WHERE datname = 'litellm'"]):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LocalStackError(f"PostgreSQL setup failed: {result.stderr.strip()}")
    if result.stdout.strip() != "1":
        created = subprocess.run([*base, "-c", "CREATE DATABASE litellm OWNER litellm"], capture_output=True, text=True,
                                 check=False)
        if created.returncode != 0:
            raise LocalStackError(f"creating the litellm database failed: {created.stderr.strip()}")


def _keys(layout: Layout, plan: Plan) -> dict[str, str]:
    """One key per tenant, made once and kept; only this user can read the file."""
    existing = json.loads(layout.keys_file.read_text()) if layout.keys_file.exists() else {}
    keys = {t.name: existing.get(t.name) or f"sk-{secrets.token_urlsafe(24)}" for t in plan.tenants}
    layout.keys_file.write_text(json.dumps(keys, indent=2, sort_keys=True), encoding="utf-8")
    layout.keys_file.chmod(0o600)
    return keys


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
    path = stack_path(stack)
    plan = require_fit(plan_stack(path))
    ports = layout.ports(plan)
    problems = preflight(plan, layout, ports)
    if problems:
        raise LocalStackError("the local stack cannot start:\n" + "\n".join(f"  - {p}" for p in problems))
    previous = State.load(layout)
    if previous and supervisor_running(layout) and previous.port_base != layout.port_base:
        raise LocalStackError(f"a stack already runs from {layout.root} on ports from {previous.port_base}; "
                              "run `tenantry local down` first")
    for folder in (layout.root, layout.logs, layout.run):
        folder.mkdir(parents=True, exist_ok=True)
    run_as = _run_as()

    def step(message: str) -> None:
        progress(f"[{time.monotonic() - started:5.1f} s] {message}")

    step(f"stack {plan.stack}: {len(plan.engines)} engines, {len(plan.tenants)} tenants, ports from {layout.port_base}")
    built = {}
    for engine in plan.engines:
        built[engine.name] = models.ensure_built(engine, layout.models)
        step(f"model for engine {engine.name} ready ({built[engine.name].model_dir.parent.name})")

    _init_postgres(layout, run_as)
    master_key = _secret(layout, "master-key", prefix="sk-")
    postgres_password = _secret(layout, "postgres-password")
    redis_password = _secret(layout, "redis-password")
    master_key_file = layout.secrets / "master-key"
    services.redis_conf(layout, ports, redis_password)
    services.prometheus_yml(plan, layout, ports, master_key_file)
    services.gateway_files(plan, layout, ports)

    from tenantry.local import prisma

    try:
        prisma_paths = prisma.install(layout.root / "prisma")
    except prisma.PrismaBridgeError as error:
        raise LocalStackError(str(error)) from None
    gateway_env = gateway_environment(layout, ports, prisma_paths)
    database_url = gateway_env["DATABASE_URL"]
    services.supervisor_conf(plan, layout, ports, built, gateway_env, run_as, log_requests)
    digest = hashlib.sha256(json.dumps(gateway_env, sort_keys=True).encode() + b"".join(
        (layout.gateway / f).read_bytes() for f in sorted(os.listdir(layout.gateway)))).hexdigest()
    State(plan.stack, str(path), layout.port_base,
          {**{f"gateway-{i}": p for i, p in enumerate(ports.gateways)}, "postgres": ports.postgres, "redis": ports.redis,
           "prometheus": ports.prometheus,
           **{f"engine-{n}": p for n, p in ports.engines.items()}}, digest).save(layout)

    if supervisor_running(layout):
        step("supervisor already running: applying changed configuration")
        _supervisorctl(layout, "reread")
        _supervisorctl(layout, "update")
        _supervisorctl(layout, "start", "postgres", "redis", "prometheus",
                       *(f"engine-{e.name}" for e in plan.engines), check=False)
    else:
        result = subprocess.run([str(SUPERVISORD), "-c", str(layout.supervisor_conf)], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise LocalStackError(f"supervisord did not start: {result.stderr.strip() or result.stdout.strip()}")
        step("supervisor started: PostgreSQL, Redis, Prometheus and the engines are starting")

    _wait("PostgreSQL", lambda: port_open(ports.postgres), 60, layout.logs / "postgres.log")
    _create_database(layout, ports, postgres_password)
    step("PostgreSQL ready")
    try:
        prisma.generate_client(prisma_paths)
        prisma.apply_migrations(database_url)
    except prisma.PrismaBridgeError as error:
        raise LocalStackError(str(error)) from None
    step("LiteLLM's database schema applied")
    _wait("Redis", lambda: port_open(ports.redis), 30, layout.logs / "redis.log")
    gateways = [f"gateway-{i}" for i in range(len(ports.gateways))]
    changed = previous is None or previous.gateway_digest != digest
    for name in gateways:
        if "RUNNING" not in _supervisorctl(layout, "status", name, check=False):
            _supervisorctl(layout, "start", name)
        elif changed:
            step(f"gateway configuration changed: restarting {name}")
            _supervisorctl(layout, "restart", name)
    for engine in plan.engines:
        port = ports.engines[engine.name]
        _wait(f"engine {engine.name}", lambda p=port: _http_ok(f"http://{HOST}:{p}/health"), 240,
              layout.logs / f"engine-{engine.name}.log")
        step(f"engine {engine.name} healthy on {HOST}:{port}")
    gateway_urls = [f"http://{HOST}:{port}" for port in ports.gateways]
    for name, url in zip(gateways, gateway_urls, strict=True):
        _wait(name, lambda u=url: _http_ok(f"{u}/health/readiness"), 180, layout.logs / f"{name}.log")
        step(f"{name} healthy on {url}")
    gateway_url = gateway_urls[0]
    _wait("Prometheus", lambda: _http_ok(f"http://{HOST}:{ports.prometheus}/-/ready"), 60,
          layout.logs / "prometheus.log")
    keys = _keys(layout, plan)
    actions = reconcile(LiteLLM(gateway_url, master_key), desired_teams(plan), keys)
    step(f"tenants reconciled: {len(actions)} changes")
    return UpResult(plan, ports, gateway_url, gateway_urls, keys, time.monotonic() - started, len(actions))


def start_side_gateway(layout: Layout, ports: Ports, name: str, port: int, plugin: bool) -> subprocess.Popen:
    """Another LiteLLM process beside the stack's own, with the same config,
    database, Redis and engines, with or without the tenant-policy plugin:
    what the gate's side-by-side and the plugin's benchmark compare. Both sides
    of a comparison are started here, the same way: the stack's own gateway
    (run by supervisord) was measurably faster than any process started beside
    it, plugin or not. The caller stops it (stop_side_gateway, by this PID)."""
    import yaml

    from tenantry.local import prisma
    from tenantry.configs.litellm import POLICY_CALLBACK

    config = yaml.safe_load((layout.gateway / "config.yaml").read_text(encoding="utf-8"))
    if not plugin:
        config["litellm_settings"]["callbacks"] = [c for c in config["litellm_settings"]["callbacks"]
                                                   if c != POLICY_CALLBACK]
    directory = layout.root / name
    directory.mkdir(exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    shutil.copyfile(layout.gateway / "tenant_policy.py", directory / "tenant_policy.py")  # found next to the config
    env = {**os.environ, **gateway_environment(layout, ports, prisma.install(layout.root / "prisma"))}
    log = _side_gateway_log(layout, name).open("w")
    return subprocess.Popen([str(services.VENV_BIN / "litellm"), "--config", str(directory / "config.yaml"), "--host",
                             HOST, "--port", str(port), "--num_workers", "1"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=layout.root)


def _side_gateway_log(layout: Layout, name: str) -> Path:
    return layout.logs / f"{name}.log"


def wait_side_gateway(layout: Layout, name: str, url: str, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not _http_ok(f"{url}/health/liveliness"):
        if time.monotonic() > deadline or process.poll() is not None:
            raise LocalStackError(f"a side gateway did not start on {url}: see {_side_gateway_log(layout, name)}")
        time.sleep(1)


def side_gateway_lost(layout: Layout, name: str, process: subprocess.Popen) -> str | None:
    """Why a side gateway is no longer running, or None while it runs. Unlike the
    stack's own, nothing restarts it: a run that lost it measured a dead gateway."""
    code = process.poll()
    if code is None:
        return None
    how = f"died of signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return f"{name} {how} during the run: see {_side_gateway_log(layout, name)}"


def stop_side_gateway(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def restart_engine_if_stopped(layout: Layout, plan: Plan, engine: str, seconds: float = 240) -> bool:
    """Start an engine supervisor is not running (a test or the gate stopped it) and
    wait until it is healthy; True when it had to be started."""
    if "RUNNING" in _supervisorctl(layout, "status", f"engine-{engine}", check=False):
        return False
    _supervisorctl(layout, "start", f"engine-{engine}", check=False)
    port = layout.ports(plan).engines[engine]
    _wait(f"engine {engine}", lambda: _http_ok(f"http://{HOST}:{port}/health"), seconds,
          layout.logs / f"engine-{engine}.log")
    return True


# --- status, down, logs ----------------------------------------------------------------------


def status(layout: Layout) -> list[ProcessStatus]:
    state = State.load(layout)
    if state is None or supervisor_running(layout) is None:
        return []
    out = _supervisorctl(layout, "status", check=False)
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
        return _http_ok(f"http://{HOST}:{port}/health")
    if name.startswith("gateway"):
        return _http_ok(f"http://{HOST}:{port}/health/readiness")
    if name == "prometheus":
        return _http_ok(f"http://{HOST}:{port}/-/ready")
    return port_open(port)


def down(layout: Layout, purge: bool = False, progress: Progress = print) -> list[int]:
    """Stop everything supervisord started, by PID; returns PIDs that had to be killed."""
    killed: list[int] = []
    supervisor = supervisor_running(layout)
    if supervisor is not None:
        pids = [s.pid for s in status(layout) if s.pid]
        _supervisorctl(layout, "shutdown", check=False)
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
                shutil.rmtree(folder)
                progress(f"removed {folder}")
    return killed


def logs(layout: Layout, name: str, lines: int = 50) -> str:
    path = layout.logs / f"{name}.log"
    if not path.exists():
        known = sorted(p.stem for p in layout.logs.glob("*.log")) if layout.logs.exists() else []
        raise LocalStackError(f"no log named {name}; known: {', '.join(known) or 'none (is the stack up?)'}")
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- smoke check -----------------------------------------------------------------------------


SMOKE_PATIENCE_SECONDS = 15
"""Beyond spot's pause, how long the smoke check keeps asking for a tenant the
gateway sheds for capacity: one Retry-After of the plugin's (at most 10 s)."""


@dataclass(frozen=True)
class SmokeResult:
    tenant: str
    tier: str
    model: str
    status: int
    seconds: float
    detail: str
    text: str = ""
    shed: str | None = None
    """Why admission refused the tenant for capacity (the gateway's X-Tenantry-Shed), if it did."""

    @property
    def served(self) -> bool:
        return self.status == 200 and bool(self.text.strip())

    @property
    def ok(self) -> bool:
        """Served with text, or a lower tier shed for capacity: the policy at work on a
        busy stack, not a broken one. A guaranteed tenant shed has lost its reservation."""
        return self.served or (self.shed is not None and self.tier != "guaranteed")


def smoke(layout: Layout) -> list[SmokeResult]:
    """One chat completion per tenant, through the gateway with its own key.

    Spot tenants go first: any other tier's request pauses spot on its engine for
    spot_pause_after_others_seconds. A tenant shed for capacity is asked again after
    the Retry-After it was given, for as long as one pause and SMOKE_PATIENCE_SECONDS,
    then reported as shed; every other refusal (a key refused, an engine down, a 5xx)
    fails at once."""
    state = State.load(layout)
    if state is None or not layout.keys_file.exists():
        raise LocalStackError(f"no stack is up from {layout.root}: run `tenantry local up`")
    plan = plan_stack(state.spec)
    keys = json.loads(layout.keys_file.read_text())
    url = f"http://{HOST}:{state.ports['gateway-0']}/v1/chat/completions"
    patience = plan.gateway.spot_pause_after_others_seconds + SMOKE_PATIENCE_SECONDS
    results = []
    for tenant in sorted(plan.tenants, key=lambda t: t.tier != "spot"):
        started = time.monotonic()
        sheds: list[str] = []
        while True:
            result, retry_after = _smoke_request(url, keys[tenant.name], tenant.name, tenant.tier,
                                                 tenant.traffic[0].target)
            if result.shed is None or time.monotonic() + retry_after > started + patience:
                break
            sheds.append(result.shed)
            time.sleep(max(retry_after, 1))
        if sheds and result.shed is None:
            waited = time.monotonic() - started - result.seconds
            result = dataclasses.replace(result, detail=f"{result.detail} (after {waited:.0f} s shed: "
                                                        f"{', '.join(sorted(set(sheds)))})")
        results.append(result)
    return results


def _smoke_request(url: str, key: str, tenant: str, tier: str, model: str) -> tuple[SmokeResult, float]:
    """The result, and the Retry-After the gateway asked for (0 without one)."""
    # min_tokens: random weights may end an answer at once (end-of-sequence first, about 1 in 150 on
    # tenantry-micro): the check is whether the stack serves text, not what the model picks.
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": f"hello from {tenant}"}],
                       "max_tokens": 8, "min_tokens": 1}).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    started = time.monotonic()
    text, shed, retry_after = "", None, 0.0
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - our own gateway
            answer = json.loads(response.read())
            code = response.status
        text = answer["choices"][0]["message"]["content"] or ""
        tokens = answer["usage"]["completion_tokens"]
        detail = f"{tokens} tokens: {text[:48]!r}" if text.strip() else f"{tokens} tokens and no text"
    except urllib.error.HTTPError as error:
        code, detail = error.code, error.read().decode(errors="replace")[:200]
        shed = error.headers.get(SHED_HEADER) if code == 429 else None
        with contextlib.suppress(TypeError, ValueError):
            retry_after = float(error.headers.get("Retry-After"))
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as error:
        code, detail = 0, str(error)
    return SmokeResult(tenant, tier, model, code, time.monotonic() - started, detail, text, shed), retry_after
