"""Real processes for the Prisma bridge's tests: a throwaway PostgreSQL
cluster and the real LiteLLM proxy with a model that needs no backend
(mock_response, priced per token), each on a free port of 127.0.0.1."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MASTER_KEY = "sk-tenantry-test-master"
PROMPT = [{"role": "user", "content": "hello there"}]
INPUT_PRICE, OUTPUT_PRICE = 0.001, 0.002
# Direct HTTP to 127.0.0.1 only, whatever proxy the environment names.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_until(check: Callable[[], Any], *, what: str, timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; bounded in time and tries."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 1):
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            break
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def call(
    method: str, url: str, *, key: str | None = None, body: Any = None, timeout: float = 30
) -> tuple[int, Any, Any]:
    """(status, parsed JSON body, headers) of one HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    if key is not None:
        request.add_header("authorization", f"Bearer {key}")
    try:
        with HTTP.open(request, timeout=timeout) as response:
            status, raw, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as err:
        status, raw, headers = err.code, err.read(), err.headers
    try:
        return status, json.loads(raw or b"null"), headers
    except json.JSONDecodeError:
        return status, raw.decode(errors="replace"), headers


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop one process we started, by its PID, escalating to SIGKILL."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class Postgres:
    """A throwaway cluster on 127.0.0.1 (PostgreSQL refuses to run as root, so
    under root it runs as the `postgres` system user)."""

    def __init__(self) -> None:
        if not (PG_BIN / "postgres").exists():
            pytest.fail(f"PostgreSQL server binaries not found in {PG_BIN} (Debian: apt-get install postgresql-15)")
        self.root = Path(tempfile.mkdtemp(prefix="tenantry-pg-"))
        self.port = free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "litellm") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "litellm") -> str:
        return subprocess.run(
            ["psql", "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-At", "-d", self.url(database), "-c", sql],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip

    def start(self) -> None:
        data = self.root / "data"
        subprocess.run(
            [*self.prefix, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
             "-E", "UTF8", "--no-locale", "--no-sync"],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        log = open(self.root / "postgres.log", "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [*self.prefix, str(PG_BIN / "postgres"), "-D", str(data), "-p", str(self.port), "-h", "127.0.0.1",
             "-k", str(self.root), "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                pytest.fail(f"PostgreSQL exited: {(self.root / 'postgres.log').read_text()[-2000:]}")
            probe = subprocess.run(["psql", "-d", self.url("postgres"), "-c", "select 1"], capture_output=True)
            return probe.returncode == 0

        wait_until(ready, what="PostgreSQL to accept connections", timeout=60, interval=0.3)
        self.psql("CREATE DATABASE litellm", database="postgres")

    def close(self) -> None:
        if self.process is not None:
            stop(self.process, signal.SIGINT)  # "fast" shutdown
        shutil.rmtree(self.root, ignore_errors=True)


class LiteLLM:
    """The real proxy (`python -m litellm.proxy.proxy_cli`) on 127.0.0.1."""

    def __init__(self, rundir: Path, env: dict[str, str]) -> None:
        self.rundir = rundir
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = rundir / "litellm.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.engines: list[int] = []
        self.startup_seconds: list[float] = []
        config = {
            "model_list": [
                {
                    "model_name": name,
                    "litellm_params": {
                        "model": f"openai/{name}",
                        "api_key": "x",
                        "mock_response": "hi",
                        "input_cost_per_token": INPUT_PRICE,
                        "output_cost_per_token": OUTPUT_PRICE,
                    },
                }
                for name in ("fake-model", "other-model")
            ],
            # Spend is written in batches; every second keeps the tests short.
            "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY", "proxy_batch_write_at": 1},
        }
        (rundir / "config.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML

    def start(self) -> None:
        started = time.monotonic()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", "config.yaml",
                 "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=self.rundir, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                pytest.fail(f"LiteLLM exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                status, body, _ = call("GET", f"{self.url}/health/readiness", timeout=5)
            except OSError:
                return False
            return status == 200 and isinstance(body, dict) and body.get("db") == "connected"

        wait_until(ready, what="LiteLLM to be ready with its database", timeout=240, interval=0.5)
        self.startup_seconds.append(time.monotonic() - started)
        assert self.process is not None
        self.engines = children(self.process.pid)  # the bridge, started by prisma-client-py

    def stop(self) -> None:
        if self.process is None:
            return
        engines = children(self.process.pid) or self.engines
        stop(self.process)
        # The bridge exits with its client (it also watches its parent); make sure.
        for pid in engines:
            for _ in range(50):
                if not alive(pid):
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        self.process = None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def bridge_complaints(self) -> list[str]:
        return [line for line in self.log.read_text(errors="replace").splitlines() if "prisma-bridge:" in line]

    def api(self, method: str, path: str, body: Any = None, key: str = MASTER_KEY) -> tuple[int, Any, Any]:
        return call(method, f"{self.url}{path}", key=key, body=body)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, payload, _ = self.api(method, path, body)
        assert status == 200, f"{method} {path} -> {status}: {payload}"
        return payload

    def chat(self, key: str, model: str = "fake-model") -> tuple[int, Any, Any]:
        return self.api("POST", "/v1/chat/completions", {"model": model, "messages": PROMPT}, key=key)

    def new_team(self, **fields: Any) -> str:
        team = self.ok("POST", "/team/new", {"models": ["fake-model"], **fields})
        return str(team["team_id"])

    def new_key(self, key: str, team_id: str, **fields: Any) -> Any:
        return self.ok("POST", "/key/generate", {"key": key, "team_id": team_id, **fields})

    def key_info(self, key: str) -> Any:
        return self.ok("GET", f"/key/info?key={key}")["info"]


def cost(usage: dict[str, int]) -> float:
    return usage["prompt_tokens"] * INPUT_PRICE + usage["completion_tokens"] * OUTPUT_PRICE
