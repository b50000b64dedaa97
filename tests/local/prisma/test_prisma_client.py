"""prisma-client-py itself through the bridge, without LiteLLM: typed values
both ways, queries and raw SQL, transactions and batches, writes and errors.
One script (each step uses the rows the ones before left) runs once, on a
database of its own; each test checks one concern of what it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tenantry.local import prisma as bridge
from tests.local.prisma.harness import Postgres
from tests.ports import free_port

SCRIPT = textwrap.dedent(
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


@pytest.fixture(scope="module")
def out(paths: bridge.BridgePaths, postgres: Postgres) -> dict:
    """What the script printed, run on a database of its own: the LiteLLM tests' teams would be
    in its queries (group_by over every team) in the shared one."""
    postgres.psql("CREATE DATABASE prisma_client", database="postgres")
    bridge.apply_migrations(postgres.url("prisma_client"))
    env = {**os.environ, **bridge.environment(paths), "DATABASE_URL": postgres.url("prisma_client")}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "prisma-bridge:" not in run.stderr, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_typed_values_keep_their_types_both_ways(out: dict) -> None:
    assert out["bigint"] == 2**60 + 1  # past 2**53: kept exact
    assert out["datetime"] == "2026-01-02T03:04:05.678000+00:00"
    assert out["json"] == {"tier": "gold", "n": [1, 2]}
    assert out["spend"] == 1.25 and out["json2"] == {"x": None}


def test_queries_filters_and_raw_sql(out: dict) -> None:
    assert out["found"] == ["direct"] and out["count"] == 1
    assert out["by_json"] == ["direct", [], None]  # Json filter; include with arguments
    (row,) = out["raw"]
    assert row["metadata"] == {"x": None}  # jsonb from raw SQL arrives as an object
    assert row["models"] == ["a", "b"] and row["ids"] == ["direct"] and row["spend"] == 1.25
    assert out["execute"] == 1
    assert out["group"] == [{"team_id": "direct", "_sum": {"spend": 2.25}, "_count": {"_all": 1}}]


def test_transactions_roll_back_or_commit_and_batches_apply(out: dict) -> None:
    assert out["alias"] == "committed" and out["blocked"] is True


def test_upserts_bulk_writes_and_errors(out: dict) -> None:
    assert out["unique"] is True and out["deleted"] == 1
    assert out["upserted"] == ["second", {"v": 2}]
    assert out["created"] == 2 and out["updated"] == 2 and out["bulk"] == {"bulk": True}
    assert out["not_found"] is True


UNREACHABLE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json
    from prisma import Prisma
    from litellm.proxy.db.exception_handler import PrismaDBExceptionHandler
    from litellm.proxy.utils import _is_transient_spend_log_write_error

    async def main():
        db = Prisma()
        await db.connect()
        try:
            await db.litellm_spendlogs.create_many(data=[{"request_id": "r", "call_type": "acompletion",
                                                          "api_key": "k", "spend": 1.0, "startTime": "2026-01-01T00:00:00Z",
                                                          "endTime": "2026-01-01T00:00:01Z"}])
        except Exception as e:
            print(json.dumps({"type": type(e).__name__, "message": str(e),
                              "unavailable": PrismaDBExceptionHandler.is_database_service_unavailable_error(e),
                              "transient": _is_transient_spend_log_write_error(e)}))

    asyncio.run(main())
    """
)


def test_an_unreachable_database_is_reported_as_the_native_engine_reports_it(paths: bridge.BridgePaths,
                                                                             postgres: Postgres) -> None:
    """Prisma's P1001, which LiteLLM reads as an outage: it keeps the spend logs of an outage for the next flush
    (before, node-postgres's `connect ECONNREFUSED` read as a row Postgres rejected, and LiteLLM dropped it)."""
    env = {**os.environ, **bridge.environment(paths),  # a port nothing listens on
           "DATABASE_URL": postgres.url("prisma_client").replace(f":{postgres.port}/", f":{free_port()}/")}
    # Bounded for a hang only: the script imports LiteLLM and starts the bridge, 53 s on a loaded machine and over
    # 120 s (the bound before) on one running two make tests' worth of work and a VM (2026-12-08).
    run = subprocess.run([sys.executable, "-c", UNREACHABLE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["message"].startswith("Can't reach database server: connect ECONNREFUSED"), seen
    assert seen["unavailable"] is True and seen["transient"] is True, seen
