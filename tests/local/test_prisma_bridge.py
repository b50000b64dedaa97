"""LiteLLM in database mode through the Prisma bridge (tenantry.local.prisma).

Real processes only: a throwaway PostgreSQL cluster, the real LiteLLM proxy
with a model that needs no backend (mock_response, priced per token), and
the bridge as LiteLLM's query engine. Every LiteLLM query shape these
requests trigger (teams, keys, auth, spend, budgets, rate limits, restarts)
goes through the bridge; a query the engine rejects as malformed is logged
by the bridge and fails the test that caused it.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tenantry.local import prisma as bridge

REPO = Path(__file__).resolve().parents[2]
WORKDIR = REPO / ".local" / "prisma"  # generated, git-ignored
PG_BIN = Path("/usr/lib/postgresql/15/bin")
MASTER_KEY = "sk-tenantry-test-master"
PROMPT = [{"role": "user", "content": "hello there"}]
INPUT_PRICE, OUTPUT_PRICE = 0.001, 0.002
# Direct HTTP to 127.0.0.1 only, whatever proxy the environment names.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


# --------------------------------------------------------------------------- PostgreSQL


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


# --------------------------------------------------------------------------- LiteLLM


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


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def paths() -> bridge.BridgePaths:
    try:
        paths = bridge.install(WORKDIR)
        bridge.generate_client(paths)
    except bridge.PrismaBridgeError as exc:
        pytest.fail(str(exc))
    return paths


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    pg = Postgres()
    try:
        pg.start()
        bridge.apply_migrations(pg.url())
        yield pg
    finally:
        pg.close()


@pytest.fixture(scope="module")
def proxy(paths: bridge.BridgePaths, postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteLLM]:
    env = {
        **os.environ,
        **bridge.environment(paths),
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "DATABASE_URL": postgres.url(),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    litellm = LiteLLM(tmp_path_factory.mktemp("litellm"), env)
    try:
        litellm.start()
        yield litellm
    finally:
        litellm.stop()
        print(f"\nLiteLLM start-up in DB mode: {', '.join(f'{s:.1f} s' for s in litellm.startup_seconds)}")


@pytest.fixture
def litellm(proxy: LiteLLM) -> Iterator[LiteLLM]:
    """The shared proxy; fails the test that made the engine reject a query."""
    before = len(proxy.bridge_complaints())
    yield proxy
    complaints = proxy.bridge_complaints()[before:]
    assert not complaints, "the bridge reported problems:\n" + "\n".join(complaints)


# --------------------------------------------------------------------------- provisioning


def test_install_is_idempotent_and_quick_the_second_time(paths: bridge.BridgePaths) -> None:
    started = time.monotonic()
    again = bridge.install(WORKDIR)
    assert bridge.generate_client(again) is False  # same schema: nothing to do
    assert again == paths
    assert time.monotonic() - started < 5

    version = subprocess.run([str(paths.query_engine), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"query-engine {bridge.ENGINE_COMMIT}"
    stub = subprocess.run([str(paths.schema_engine), "--version"], capture_output=True, text=True, check=True)
    assert bridge.ENGINE_COMMIT in stub.stdout
    assert "binaryTargets" not in paths.schema.read_text()
    env = bridge.environment(paths)
    assert env["PRISMA_QUERY_ENGINE_BINARY"] == str(paths.query_engine)
    assert env["DISABLE_SCHEMA_UPDATE"] == "true"


def test_missing_npm_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    only_node = tmp_path / "bin"
    only_node.mkdir()
    node = shutil.which("node")
    assert node is not None
    (only_node / "node").symlink_to(node)
    monkeypatch.setenv("PATH", str(only_node))
    with pytest.raises(bridge.PrismaBridgeError, match=r"`npm` is not on PATH.*apt-get install npm"):
        bridge.install(tmp_path / "work")


def test_migrations_apply_once_and_are_recorded_like_prisma_does(postgres: Postgres) -> None:
    folders = sorted(p.name for p in bridge.migrations_dir().iterdir() if (p / "migration.sql").is_file())
    assert any(" " in name for name in folders)  # one folder name has spaces
    assert bridge.apply_migrations(postgres.url()) == []  # the fixture applied them all
    recorded = postgres.psql('SELECT migration_name FROM "_prisma_migrations" ORDER BY migration_name').splitlines()
    assert recorded == folders
    assert postgres.psql("SELECT to_regclass('\"LiteLLM_VerificationToken\"') IS NOT NULL") == "t"


def test_prisma_client_round_trips_through_the_bridge(paths: bridge.BridgePaths, postgres: Postgres) -> None:
    """prisma-client-py itself, without LiteLLM: typed values both ways, raw
    SQL, transactions, batches and errors."""
    script = textwrap.dedent(
        """
        import asyncio, datetime, json
        from prisma import Json, Prisma
        from prisma.errors import RecordNotFoundError, UniqueViolationError

        async def main():
            db = Prisma()
            await db.connect()
            out = {}
            when = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)
            budget = await db.litellm_budgettable.create(
                data={"max_budget": 2.5, "rpm_limit": 2**60 + 1, "budget_reset_at": when,
                      "created_by": "t", "updated_by": "t"})
            out["bigint"] = budget.rpm_limit
            out["datetime"] = budget.budget_reset_at.isoformat()
            team = await db.litellm_teamtable.create(data={
                "team_id": "direct", "models": ["a", "b"], "metadata": json.dumps({"tier": "gold", "n": [1, 2]})})
            out["json"] = team.metadata
            team = await db.litellm_teamtable.update(
                where={"team_id": "direct"}, data={"spend": {"increment": 1.25}, "metadata": json.dumps({"x": None})})
            out["spend"], out["json2"] = team.spend, team.metadata
            found = await db.litellm_teamtable.find_many(
                where={"team_id": {"in": ["direct"]},
                       "created_at": {"lt": datetime.datetime.now(datetime.timezone.utc)}},
                order={"created_at": "desc"}, take=5)
            out["found"] = [t.team_id for t in found]
            out["count"] = await db.litellm_teamtable.count(where={"team_id": "direct"})
            by_json = await db.litellm_teamtable.find_first(
                where={"metadata": {"equals": Json({"x": None})}},
                include={"projects": {"where": {"metadata": {"not": Json({})}}, "take": 1},
                         "litellm_organization_table": True})
            out["by_json"] = [by_json.team_id, by_json.projects, by_json.litellm_organization_table]
            out["raw"] = await db.query_raw(
                'SELECT team_id, metadata, spend, models, ARRAY_AGG(team_id) OVER () AS ids '
                'FROM "LiteLLM_TeamTable" WHERE team_id = $1', "direct")
            out["execute"] = await db.execute_raw(
                'UPDATE "LiteLLM_TeamTable" SET spend = spend + $1 WHERE team_id = $2', 1.0, "direct")
            out["group"] = await db.litellm_teamtable.group_by(["team_id"], sum={"spend": True}, count=True)
            try:
                async with db.tx() as tx:
                    await tx.litellm_teamtable.update(where={"team_id": "direct"}, data={"team_alias": "rolled-back"})
                    raise RuntimeError("roll back")
            except RuntimeError:
                pass
            async with db.tx() as tx:
                await tx.litellm_teamtable.update(where={"team_id": "direct"}, data={"team_alias": "committed"})
            async with db.batch_() as batch:
                batch.litellm_teamtable.update(where={"team_id": "direct"}, data={"blocked": True})
            team = await db.litellm_teamtable.find_unique(where={"team_id": "direct"})
            out["alias"], out["blocked"] = team.team_alias, team.blocked
            try:
                await db.litellm_teamtable.create(data={"team_id": "direct"})
            except UniqueViolationError:
                out["unique"] = True
            for alias in ("first", "second"):  # create, then update
                await db.litellm_teamtable.upsert(
                    where={"team_id": "upserted"},
                    data={"create": {"team_id": "upserted", "team_alias": alias, "metadata": Json({"v": 1})},
                          "update": {"team_alias": alias, "metadata": Json({"v": 2})}})
            upserted = await db.litellm_teamtable.find_unique_or_raise(where={"team_id": "upserted"})
            out["upserted"] = [upserted.team_alias, upserted.metadata]
            out["created"] = await db.litellm_teamtable.create_many(
                data=[{"team_id": "many-1"}, {"team_id": "many-2"}, {"team_id": "upserted"}], skip_duplicates=True)
            out["updated"] = await db.litellm_teamtable.update_many(
                where={"team_id": {"startswith": "many-"}}, data={"metadata": Json({"bulk": True})})
            out["bulk"] = (await db.litellm_teamtable.find_first(where={"team_id": "many-2"})).metadata
            try:
                await db.litellm_teamtable.find_unique_or_raise(where={"team_id": "absent"})
            except RecordNotFoundError:
                out["not_found"] = True
            out["deleted"] = await db.litellm_teamtable.delete_many(where={"team_id": "direct"})
            await db.disconnect()
            print(json.dumps(out))

        asyncio.run(main())
        """
    )
    env = {**os.environ, **bridge.environment(paths), "DATABASE_URL": postgres.url()}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "prisma-bridge:" not in run.stderr, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["bigint"] == 2**60 + 1  # past 2**53: kept exact
    assert out["datetime"] == "2026-01-02T03:04:05.678000+00:00"
    assert out["json"] == {"tier": "gold", "n": [1, 2]}
    assert out["spend"] == 1.25 and out["json2"] == {"x": None}
    assert out["found"] == ["direct"] and out["count"] == 1
    assert out["by_json"] == ["direct", [], None]  # Json filter; include with arguments
    (row,) = out["raw"]
    assert row["metadata"] == {"x": None}  # jsonb from raw SQL arrives as an object
    assert row["models"] == ["a", "b"] and row["ids"] == ["direct"] and row["spend"] == 1.25
    assert out["execute"] == 1
    assert out["group"] == [{"team_id": "direct", "_sum": {"spend": 2.25}, "_count": {"_all": 1}}]
    assert out["alias"] == "committed" and out["blocked"] is True
    assert out["unique"] is True and out["deleted"] == 1
    assert out["upserted"] == ["second", {"v": 2}]
    assert out["created"] == 2 and out["updated"] == 2 and out["bulk"] == {"bulk": True}
    assert out["not_found"] is True


# --------------------------------------------------------------------------- LiteLLM


def test_teams_are_created_updated_and_listed(litellm: LiteLLM, postgres: Postgres) -> None:
    team = litellm.ok(
        "POST",
        "/team/new",
        {
            "team_alias": "tenant-a",
            "models": ["fake-model"],
            "tpm_limit": 1000,
            "rpm_limit": 50,
            "max_budget": 10.0,
            "budget_duration": "30d",
            "metadata": {"tenant": "a", "tier": "gold"},
        },
    )
    team_id = team["team_id"]
    assert team["models"] == ["fake-model"] and team["tpm_limit"] == 1000 and team["rpm_limit"] == 50
    assert team["max_budget"] == 10.0 and team["budget_duration"] == "30d" and team["budget_reset_at"]
    assert team["metadata"] == {"tenant": "a", "tier": "gold"}

    update = {"team_id": team_id, "tpm_limit": 2000, "metadata": {"tenant": "a", "tier": "silver"}}
    litellm.ok("POST", "/team/update", update)
    info = litellm.ok("GET", f"/team/info?team_id={team_id}")["team_info"]
    assert info["tpm_limit"] == 2000 and info["rpm_limit"] == 50
    assert info["metadata"]["tier"] == "silver"
    listed = litellm.ok("GET", "/team/list")
    assert team_id in {t["team_id"] for t in listed}
    # Stored as a JSON object, not as a string holding JSON (the Json trap).
    sql = f"SELECT jsonb_typeof(metadata), metadata->>'tier' FROM \"LiteLLM_TeamTable\" WHERE team_id = '{team_id}'"
    assert postgres.psql(sql) == "object|silver"


def test_keys_authenticate_block_unblock_and_list(litellm: LiteLLM, postgres: Postgres) -> None:
    team_id = litellm.new_team(team_alias="tenant-b", metadata={"tenant": "b"})
    key = "sk-tenant-b-0001"
    generated = litellm.new_key(key, team_id, metadata={"tenant": "b", "purpose": "test"})
    assert generated["key"] == key and generated["team_id"] == team_id

    info = litellm.key_info(key)
    assert info["team_id"] == team_id and info["metadata"] == {"tenant": "b", "purpose": "test"}
    sql = f"SELECT jsonb_typeof(metadata) FROM \"LiteLLM_VerificationToken\" WHERE token = '{generated['token']}'"
    assert postgres.psql(sql) == "object"
    listed = litellm.ok("GET", f"/key/list?team_id={team_id}")
    assert listed["keys"] == [generated["token"]]

    status, body, _ = litellm.chat(key)
    assert status == 200 and body["choices"][0]["message"]["content"] == "hi"
    status, body, _ = litellm.chat(key, "other-model")
    assert status == 403 and body["error"]["type"] == "team_model_access_denied"

    litellm.ok("POST", "/key/block", {"key": key})
    assert litellm.key_info(key)["blocked"] is True
    status, body, _ = litellm.chat(key)
    assert status == 401 and "blocked" in body["error"]["message"]
    litellm.ok("POST", "/key/unblock", {"key": key})
    status, _, _ = litellm.chat(key)
    assert status == 200
    status, _, _ = litellm.chat("sk-not-a-key")
    assert status == 401


def test_spend_is_tracked_on_key_and_team(litellm: LiteLLM) -> None:
    team_id = litellm.new_team(team_alias="tenant-c")
    key = "sk-tenant-c-0001"
    litellm.new_key(key, team_id)
    expected = 0.0
    for _ in range(3):
        status, body, _ = litellm.chat(key)
        assert status == 200
        expected += cost(body["usage"])
    assert expected > 0

    def written() -> bool:
        return litellm.key_info(key)["spend"] >= expected - 1e-9

    wait_until(written, what="key spend to be written", timeout=60, interval=1)
    assert litellm.key_info(key)["spend"] == pytest.approx(expected)
    wait_until(
        lambda: litellm.ok("GET", f"/team/info?team_id={team_id}")["team_info"]["spend"] >= expected - 1e-9,
        what="team spend to be written",
        timeout=30,
        interval=1,
    )
    team = litellm.ok("GET", f"/team/info?team_id={team_id}")["team_info"]
    assert team["spend"] == pytest.approx(expected)


def test_requests_are_refused_once_the_team_budget_is_spent(litellm: LiteLLM) -> None:
    team_id = litellm.new_team(team_alias="tenant-d", max_budget=0.1)
    key = "sk-tenant-d-0001"
    litellm.new_key(key, team_id)
    statuses: list[int] = []
    refusal: Any = None
    for _ in range(12):  # each request costs ~0.05: refused by the fourth, a few spare for timing
        status, body, _ = litellm.chat(key)
        statuses.append(status)
        if status != 200:
            refusal = body
            break
        time.sleep(0.3)
    assert refusal is not None, f"never refused: {statuses}"
    # LiteLLM 1.108 answers 422 with type budget_exceeded.
    assert statuses[:-1] == [200] * (len(statuses) - 1) and statuses[-1] == 422, (statuses, refusal)
    assert refusal["error"]["type"] == "budget_exceeded", refusal
    assert len(statuses) >= 3  # 0.1 buys at least two ~0.05 requests
    team = litellm.ok("GET", f"/team/info?team_id={team_id}")["team_info"]
    assert team["max_budget"] == 0.1


def test_team_rpm_limit_gives_exactly_that_many_requests(litellm: LiteLLM) -> None:
    team_id = litellm.new_team(team_alias="tenant-e", rpm_limit=5)
    key = "sk-tenant-e-0001"
    litellm.new_key(key, team_id)
    results = [litellm.chat(key) for _ in range(6)]
    assert [status for status, _, _ in results] == [200] * 5 + [429]
    _, body, headers = results[-1]
    assert "rate limit" in body["error"]["message"].lower()
    assert headers.get("retry-after")


def test_keys_survive_a_litellm_restart(litellm: LiteLLM) -> None:
    team_id = litellm.new_team(team_alias="tenant-f", metadata={"tenant": "f"})
    key = "sk-tenant-f-0001"
    litellm.new_key(key, team_id, metadata={"tenant": "f"})
    assert litellm.chat(key)[0] == 200
    engines = list(litellm.engines)

    litellm.stop()
    assert engines and not any(alive(pid) for pid in engines), "the bridge outlived LiteLLM"
    litellm.start()

    info = litellm.key_info(key)
    assert info["team_id"] == team_id and info["metadata"] == {"tenant": "f"}
    assert litellm.chat(key)[0] == 200
    assert litellm.chat(key, "other-model")[0] == 403
