"""The bridge's own provisioning: its install, its refusals, and the
migrations it applies the way Prisma records them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tenantry.local import prisma as bridge
from tests.local.prisma.conftest import WORKDIR
from tests.local.prisma.harness import Postgres


def test_install_is_idempotent_and_runs_nothing_the_second_time(paths: bridge.BridgePaths,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(bridge, "_run", lambda argv, **_: ran.append(argv) or "")
    written = {path: path.stat().st_mtime_ns for path in (paths.query_engine, paths.schema_engine, paths.schema,
                                                           WORKDIR / ".installed")}
    again = bridge.install(WORKDIR)
    assert bridge.generate_client(again) is False  # same schema: nothing to do
    assert again == paths
    assert ran == []  # neither npm ci nor prisma generate: the second time costs no install
    assert {path: path.stat().st_mtime_ns for path in written} == written  # and rewrites nothing

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
