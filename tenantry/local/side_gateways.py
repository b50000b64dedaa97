"""LiteLLM processes started beside the local stack's own gateways, with the
same config, database, Redis and engines, with or without the tenant-policy
plugin: what the gate's side-by-side and the plugin's benchmark compare.
Both sides of a comparison are started here, the same way (docs/decisions.md:
Side-by-side compares two side gateways). The caller stops each one
(stop_side_gateway, by its PID)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tenantry.configs.litellm import LIVENESS_PATH
from tenantry.local import credentials, services
from tenantry.local.health import LocalStackError, http_ok
from tenantry.local.layout import HOST, Layout, Ports


def start_side_gateway(layout: Layout, ports: Ports, name: str, port: int, plugin: bool,
                       policy: dict | None = None) -> subprocess.Popen:
    """A LiteLLM process on `port` with the stack's config, with or without the plugin; `policy` replaces the
    plugin's settings (the stack's tenant-policy.json, as the Plan rendered it) for this process alone."""
    import yaml

    from tenantry.configs.litellm import PLUGIN_FILES, POLICY_CALLBACK
    from tenantry.local import prisma

    config = yaml.safe_load((layout.gateway / "config.yaml").read_text(encoding="utf-8"))
    if not plugin:
        config["litellm_settings"]["callbacks"] = [c for c in config["litellm_settings"]["callbacks"]
                                                   if c != POLICY_CALLBACK]
    directory = layout.root / name
    directory.mkdir(exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for plugin_file in PLUGIN_FILES:  # found next to the config
        shutil.copyfile(layout.gateway / plugin_file, directory / plugin_file)
    env = {**os.environ, **credentials.gateway_environment(layout, ports, prisma.install(layout.root / "prisma"))}
    if policy is not None:
        (directory / "tenant-policy.json").write_text(json.dumps(policy, indent=1), encoding="utf-8")
        env["TENANTRY_POLICY_FILE"] = str(directory / "tenant-policy.json")
    log = side_gateway_log(layout, name).open("w")
    return subprocess.Popen([str(services.VENV_BIN / "litellm"), "--config", str(directory / "config.yaml"), "--host",
                             HOST, "--port", str(port), "--num_workers", "1"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=layout.root)


def side_gateway_log(layout: Layout, name: str) -> Path:
    return layout.logs / f"{name}.log"


def wait_side_gateway(layout: Layout, name: str, url: str, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not http_ok(f"{url}{LIVENESS_PATH}"):
        if time.monotonic() > deadline or process.poll() is not None:
            raise LocalStackError(f"a side gateway did not start on {url}: see {side_gateway_log(layout, name)}")
        time.sleep(1)


def side_gateway_lost(layout: Layout, name: str, process: subprocess.Popen) -> str | None:
    """Why a side gateway is no longer running, or None while it runs. Unlike the
    stack's own, nothing restarts it: a run that lost it measured a dead gateway."""
    code = process.poll()
    if code is None:
        return None
    how = f"died of signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return f"{name} {how} during the run: see {side_gateway_log(layout, name)}"


def stop_side_gateway(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
