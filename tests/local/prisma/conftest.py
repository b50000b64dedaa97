"""One PostgreSQL cluster (migrated by the bridge) and one LiteLLM proxy in
database mode for every test of the Prisma bridge (tenantry.local.prisma).

Every LiteLLM query shape these tests trigger (teams, keys, auth, spend,
budgets, rate limits, restarts) goes through the bridge; a query the engine
rejects as malformed is logged by the bridge and fails the test that caused it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenantry.local import prisma as bridge
from tests.local.prisma.harness import MASTER_KEY, LiteLLM, Postgres

REPO = Path(__file__).resolve().parents[3]
WORKDIR = REPO / ".local" / "prisma"  # generated, git-ignored


@pytest.fixture(scope="package")
def paths() -> bridge.BridgePaths:
    try:
        paths = bridge.install(WORKDIR)
        bridge.generate_client(paths)
    except bridge.PrismaBridgeError as exc:
        pytest.fail(str(exc))
    return paths


@pytest.fixture(scope="package")
def postgres() -> Iterator[Postgres]:
    pg = Postgres()
    try:
        pg.start()
        bridge.apply_migrations(pg.url())
        yield pg
    finally:
        pg.close()


@pytest.fixture(scope="package")
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
