"""PostgreSQL for the local stack's gateways: its data folder, made once by
initdb, and the litellm role and database."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from tenantry.local import services
from tenantry.local.health import LocalStackError
from tenantry.local.layout import POSTGRES_USER, Layout, Ports


def run_as() -> str | None:
    """PostgreSQL refuses to run as root; as root, run it as the postgres user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_USER)
    except KeyError as missing:
        raise LocalStackError("running as root needs the `postgres` user (apt-get install postgresql)") from missing
    return POSTGRES_USER


def init_data(layout: Layout, user: str | None) -> None:
    home, data = layout.postgres_home, layout.postgres_data
    if (data / "PG_VERSION").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    for folder in (home, data):
        folder.chmod(0o700)
    if user:  # from the user's home down, every folder is the user's, whatever the umask made
        for folder in (home.parent, home, data):
            shutil.chown(folder, user, user)
    if not home.is_relative_to(layout.root):  # say whose it is, for whoever finds it there
        (home / "stack-directory").write_text(f"{layout.root}\n", encoding="utf-8")
    result = subprocess.run(
        [str(services.POSTGRES_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
         "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-instructions"],
        capture_output=True, text=True, check=False, user=user, cwd=home,
    )
    if result.returncode != 0:
        raise LocalStackError(f"initdb failed: {result.stderr.strip()}")


def accepts_connections(socket_folder: Path, port: int) -> bool:
    """PostgreSQL answers queries: its port opens while it is still starting up, when a client is refused with
    "the database system is starting up" (a fresh clone's gate stack failed so, 2026-12-07). pg_isready tells the
    two apart (exit 1 is "rejecting connections"); any other answer, a refused password included, is a server up."""
    ready = subprocess.run(["/usr/bin/pg_isready", "-q", "-h", str(socket_folder), "-p", str(port)],
                           capture_output=True, check=False)
    return ready.returncode == 0


def create_database(layout: Layout, ports: Ports, password: str) -> None:
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
