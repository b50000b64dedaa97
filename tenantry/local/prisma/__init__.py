"""LiteLLM's database mode without Prisma's native engines.

LiteLLM keeps keys, teams, budgets and spend in PostgreSQL through
prisma-client-py 0.15.0, which needs Prisma's native query engine (5.17.0,
commit 393aa359…). Where that binary cannot be downloaded, Prisma's own
WebAssembly engine of the same commit runs behind ``bridge.mjs``, a small Node
server speaking the native engine's HTTP protocol. This module provisions it:

- :func:`install` puts the pinned npm packages in a work directory outside
  the source tree and writes the launcher and the schema-engine stub;
- :func:`generate_client` runs ``prisma generate`` for LiteLLM's schema;
- :func:`apply_migrations` applies litellm-proxy-extras' SQL migrations with
  psql (the schema engine is not available either);
- :func:`environment` is what LiteLLM's process needs.

Only the standard library is used, so the rest of tenantry can import it.
``python -m tenantry.local.prisma WORKDIR [DATABASE_URL]`` does all of it
and prints the environment as shell exports.

The npm pins (package.json, package-lock.json) follow prisma-client-py: its
``expected_engine_version`` names the engine commit, and
``@prisma/query-engine-wasm`` publishes ``<version>-<n>.<commit>`` for it;
``prisma`` (the CLI ``prisma generate`` runs) and ``@prisma/adapter-pg``
take the same ``<version>``. tests/local/prisma/ covers the
query shapes LiteLLM uses; run it after changing any pin.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENGINE_COMMIT",
    "BridgePaths",
    "PrismaBridgeError",
    "apply_migrations",
    "environment",
    "generate_client",
    "install",
    "litellm_schema",
    "migrations_dir",
]

ENGINE_COMMIT = "393aa359c9ad4a4bb28630fb5613f9c281cde053"
HERE = Path(__file__).resolve().parent
BRIDGE = HERE / "bridge.mjs"
# Any fixed number: serialises concurrent apply_migrations() runs on one database.
MIGRATION_LOCK_KEY = 7_246_101_593


class PrismaBridgeError(RuntimeError):
    """A problem the user can fix; the message says how."""


@dataclass(frozen=True)
class BridgePaths:
    workdir: Path
    node_modules: Path
    query_engine: Path  # launcher: PRISMA_QUERY_ENGINE_BINARY
    schema_engine: Path  # stub: PRISMA_SCHEMA_ENGINE_BINARY
    schema: Path  # LiteLLM's schema without binaryTargets, written by generate_client()


def _which(tool: str, hint: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise PrismaBridgeError(f"`{tool}` is not on PATH. {hint}")
    return found


def _run(argv: list[str], *, what: str, env: Mapping[str, str] | None = None, timeout: float = 600) -> str:
    """Run a command quietly; on failure raise with its output, not a traceback."""
    try:
        proc = subprocess.run(
            argv, env=None if env is None else dict(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PrismaBridgeError(f"{what} did not finish within {timeout:.0f} s") from exc
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise PrismaBridgeError(f"{what} failed (exit {proc.returncode}):\n{output[-4000:]}")
    return proc.stdout


@contextlib.contextmanager
def _locked(workdir: Path) -> Iterator[None]:
    """Serialise install/generate runs sharing a work directory (npm ci and
    prisma generate both rewrite files that another run may be reading)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(mode)
        tmp.replace(path)


def install(workdir: Path) -> BridgePaths:
    """Install the pinned npm packages into ``workdir`` and write the launchers.

    Safe to run twice: ``npm ci`` runs only when the lockfile changed.
    ``--ignore-scripts`` because the ``prisma`` package's install script would
    try to download the native engines this exists to replace.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    node = _which("node", "Install Node.js 18 or newer (Debian: `apt-get install nodejs npm`).")
    npm = _which("npm", "Install npm (Debian: `apt-get install npm`).")

    with _locked(workdir):
        stamp = workdir / ".installed"
        manifests = [HERE / "package.json", HERE / "package-lock.json"]
        digest = hashlib.sha256(b"".join(m.read_bytes() for m in manifests)).hexdigest()
        node_modules = workdir / "node_modules"
        if not (stamp.exists() and stamp.read_text() == digest and node_modules.is_dir()):
            for manifest in manifests:
                shutil.copyfile(manifest, workdir / manifest.name)
            quiet = ["--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
            _run(
                [npm, "ci", "--prefix", str(workdir), *quiet],
                what="npm ci (the Prisma WebAssembly engine and node-postgres)",
            )
            stamp.write_text(digest)

    query_engine = workdir / "query-engine"
    _write_if_changed(
        query_engine,
        "#!/bin/sh\n"
        "# Generated by tenantry.local.prisma.install(): Prisma's query engine as a Node program.\n"
        f"TENANTRY_PRISMA_NODE_MODULES={shlex.quote(str(node_modules))}\n"
        "export TENANTRY_PRISMA_NODE_MODULES\n"
        f"exec {shlex.quote(node)} {shlex.quote(str(BRIDGE))} \"$@\"\n",
        0o755,
    )
    schema_engine = workdir / "schema-engine"
    _write_if_changed(
        schema_engine,
        "#!/bin/sh\n"
        "# Generated by tenantry.local.prisma.install(). The Prisma CLI wants a schema engine to exist;\n"
        "# migrations are applied with psql instead (tenantry.local.prisma.apply_migrations).\n"
        'case "$1" in --version|-V) echo "schema-engine-cli ' + ENGINE_COMMIT + '"; exit 0;; esac\n'
        'echo "no Prisma schema engine on this machine: migrations are applied with psql" >&2\n'
        "exit 1\n",
        0o755,
    )
    return BridgePaths(
        workdir=workdir,
        node_modules=node_modules,
        query_engine=query_engine,
        schema_engine=schema_engine,
        schema=workdir / "schema.prisma",
    )


def environment(paths: BridgePaths) -> dict[str, str]:
    """The variables LiteLLM (and ``prisma generate``) need, to add to os.environ."""
    return {
        "PRISMA_QUERY_ENGINE_BINARY": str(paths.query_engine),
        "PRISMA_SCHEMA_ENGINE_BINARY": str(paths.schema_engine),
        "PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING": "1",
        # The pinned Prisma CLI (package.json) lives here, so prisma-client-py
        # neither downloads one nor writes to ~/.cache.
        "PRISMA_BINARY_CACHE_DIR": str(paths.workdir),
        "PRISMA_HIDE_UPDATE_MESSAGE": "true",
        "CHECKPOINT_DISABLE": "1",  # the Prisma CLI's update check calls home
        # Migrations come from apply_migrations(); LiteLLM must not run Prisma's.
        "DISABLE_SCHEMA_UPDATE": "true",
    }


def litellm_schema() -> Path:
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        raise PrismaBridgeError("litellm is not installed in this Python environment (`pip install 'litellm[proxy]'`).")
    return Path(spec.origin).parent / "proxy" / "schema.prisma"


def _prisma_package() -> Path:
    spec = importlib.util.find_spec("prisma")
    if spec is None or spec.origin is None:
        raise PrismaBridgeError("prisma-client-py is not installed in this Python environment (`pip install prisma`).")
    return Path(spec.origin).parent


def generate_client(paths: BridgePaths, env: Mapping[str, str] | None = None) -> bool:
    """Generate the Python client for LiteLLM's schema into the installed ``prisma`` package.

    The schema is copied without ``binaryTargets`` (those would make the CLI
    fetch engines for other platforms). Skipped when the generated client was
    made from the same schema text; returns whether it generated.
    """
    with _locked(paths.workdir):
        text = re.sub(r"^\s*binaryTargets\s*=.*\n", "", litellm_schema().read_text(), flags=re.MULTILINE)
        _write_if_changed(paths.schema, text)
        # The CLI reformats the schema it copies into the package, so remember
        # which packaged copy came from which schema text, per Python environment.
        packaged = _prisma_package() / "schema.prisma"
        stamp_file = paths.workdir / "generated.json"
        stamps = json.loads(stamp_file.read_text()) if stamp_file.exists() else {}
        key = str(packaged)
        want = hashlib.sha256(text.encode()).hexdigest()
        if packaged.exists() and stamps.get(key) == [want, hashlib.sha256(packaged.read_bytes()).hexdigest()]:
            return False

        run_env = {**os.environ, **environment(paths), **(env or {})}
        # The Prisma CLI starts the generator as `prisma-client-py`, found on PATH.
        run_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), run_env.get("PATH", "")])
        _run(
            [sys.executable, "-m", "prisma", "generate", f"--schema={paths.schema}"],
            what="prisma generate",
            env=run_env,
        )
        stamps[key] = [want, hashlib.sha256(packaged.read_bytes()).hexdigest()]
        _write_if_changed(stamp_file, json.dumps(stamps, indent=1) + "\n")
        return True


def migrations_dir() -> Path:
    spec = importlib.util.find_spec("litellm_proxy_extras")
    if spec is None or spec.origin is None:
        raise PrismaBridgeError("litellm-proxy-extras is not installed (`pip install litellm-proxy-extras`).")
    return Path(spec.origin).parent / "migrations"


def _psql_quote(path: Path) -> str:
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def apply_migrations(database_url: str, migrations: Path | None = None) -> list[str]:
    """Apply LiteLLM's SQL migrations in name order; return the names applied now.

    Applied migrations are recorded in Prisma's own ``_prisma_migrations``
    ledger (same table and checksums as ``prisma migrate deploy``), so a later
    run, or a real Prisma CLI, skips them. One psql session does it all under
    an advisory lock; each migration is checked against the ledger inside that
    lock, so two concurrent runs cannot apply one twice.
    """
    psql = _which("psql", "Install the PostgreSQL client (Debian: `apt-get install postgresql-client`).")
    folder = migrations or migrations_dir()
    if not folder.is_dir():
        raise PrismaBridgeError(f"no migrations folder at {folder}")
    names = sorted(p.name for p in folder.iterdir() if (p / "migration.sql").is_file())
    if not names:
        raise PrismaBridgeError(f"no migrations under {folder}")

    lines = [
        r"\set ON_ERROR_STOP on",
        r"\set QUIET on",
        "SET client_min_messages = warning;",
        f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY});",
        # Prisma's own ledger definition (migrate deploy creates the same table).
        'CREATE TABLE IF NOT EXISTS "_prisma_migrations" ('
        ' "id" VARCHAR(36) PRIMARY KEY NOT NULL, "checksum" VARCHAR(64) NOT NULL, "finished_at" TIMESTAMPTZ,'
        ' "migration_name" VARCHAR(255) NOT NULL, "logs" TEXT, "rolled_back_at" TIMESTAMPTZ,'
        ' "started_at" TIMESTAMPTZ NOT NULL DEFAULT now(), "applied_steps_count" INTEGER NOT NULL DEFAULT 0);',
    ]
    for name in names:
        sql_file = folder / name / "migration.sql"
        checksum = hashlib.sha256(sql_file.read_bytes()).hexdigest()
        literal = name.replace("'", "''")
        lines += [
            "SELECT NOT EXISTS (SELECT 1 FROM \"_prisma_migrations\" WHERE migration_name = "
            f"'{literal}' AND finished_at IS NOT NULL AND rolled_back_at IS NULL) AS pending \\gset",
            r"\if :pending",
            # The name goes to stdout so the caller learns what was applied.
            rf"\echo applying {name}",
            rf"\i {_psql_quote(sql_file)}",
            'INSERT INTO "_prisma_migrations" (id, checksum, finished_at, migration_name, applied_steps_count)'
            f" VALUES (gen_random_uuid()::text, '{checksum}', now(), '{literal}', 1);",
            r"\endif",
        ]
    lines.append(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY});")

    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write("\n".join(lines) + "\n")
    try:
        out = _run(
            [psql, "--no-psqlrc", "--quiet", "--tuples-only", "--dbname", database_url, "--file", script.name],
            what="applying LiteLLM's migrations with psql",
            env={**os.environ, "PGCONNECT_TIMEOUT": "10"},
        )
    finally:
        os.unlink(script.name)
    prefix = "applying "
    return [line[len(prefix) :] for line in out.splitlines() if line.startswith(prefix)]


def _main(argv: list[str] | None = None) -> int:
    """``python -m tenantry.local.prisma WORKDIR [DATABASE_URL]``: install,
    generate, migrate, then print the environment as shell exports."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"} or len(args) > 2:
        print("usage: python -m tenantry.local.prisma WORKDIR [DATABASE_URL]", file=sys.stderr)
        return 2
    try:
        paths = install(Path(args[0]))
        generate_client(paths)
        if len(args) == 2:
            applied = apply_migrations(args[1])
            print(f"# {len(applied)} migration(s) applied", file=sys.stderr)
    except PrismaBridgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for key, value in environment(paths).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0
