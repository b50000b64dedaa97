"""A tenant's key revoked by hand and a tenant offboarded, against the tests stack's real gateway (issue 35, items 11
and 14): what the reconciler keeps blocked, lifts and refuses, and runbooks/procedures/offboard-a-tenant.md's own
commands run as on-call runs them."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest

from tenantry.configs.teams import desired_teams, salt_digest
from tenantry.gateway.reconciler import LiteLLM, SpecConflict, reconcile
from tenantry.stacks import plan_stack
from tests.local.conftest import SPEC, chat
from tests.unit.runbook_commands import code_blocks

OFFBOARDING = Path(__file__).resolve().parents[2] / "runbooks" / "procedures" / "offboard-a-tenant.md"


def test_a_revoked_key_stays_revoked_through_every_reconciler_run(stack):
    """A leaked key blocked by hand (the rotation procedure's first step for a leak) is never unblocked by the
    reconciler, which runs every 15 minutes on a cluster: not while the tenant is in the spec, nor after it left
    the spec and came back. Each run reports it (keep-revoked); only the reconciler's own block is lifted
    (issue 35, item 11)."""
    admin, plan, keys = LiteLLM(stack.url, stack.master_key), plan_stack(str(SPEC)), dict(stack.up.keys)
    desired = desired_teams(plan)
    assert reconcile(admin, desired, keys) == []
    without_globex = [t for t in desired if t["team_alias"] != "globex"]
    try:
        admin.call("POST", "/key/block", {"key": keys["globex"]})
        assert [(a.verb, a.tenant) for a in reconcile(admin, desired, keys)] == [("keep-revoked", "globex")]
        left = reconcile(admin, without_globex, {k: v for k, v in keys.items() if k != "globex"})
        assert [(a.verb, a.tenant) for a in left] == [("block-team-keys", "globex")]
        assert [(a.verb, a.tenant) for a in reconcile(admin, desired, keys)] == [("keep-revoked", "globex")]
        assert admin.key_info(keys["globex"])["blocked"] is True
        with stack.client("globex") as globex:
            assert chat(globex, "micro").status_code == 401
    finally:  # the operator's decision undone by hand, as only an operator may
        admin.call("POST", "/key/unblock", {"key": keys["globex"]})
    assert reconcile(admin, desired, keys) == []
    with stack.client("globex") as globex:
        assert chat(globex, "micro").status_code == 200


def _verbs(actions) -> list[tuple[str, str]]:
    return [(a.verb, a.tenant) for a in actions]


def _newcomer(desired: list[dict], name: str, salt: str) -> dict:
    """A tenant the stack's spec does not have, shaped like its first one (the plugin does not serve it: these
    checks are the gateway's records)."""
    first = desired[0]
    return {**first, "team_alias": name, "metadata": {**first["metadata"], "cache_salt_digest": salt_digest(salt)}}


def _teams_named(admin: LiteLLM, prefix: str) -> list[dict]:
    return [t for t in admin.teams() if str(t.get("team_alias")).startswith(prefix)]


def test_an_offboarded_tenants_name_gets_a_fresh_team_and_never_its_cache_salt(stack):
    """wayne is registered, removed from the spec (its keys blocked), and retired by the procedure's step 3, run
    with bash: no team or key keeps its name, the retired team leaves the reconciler with its keys blocked. The
    name used again gets a team of its own, but only with a salt of its own: the default one is refused."""
    admin, plan = LiteLLM(stack.url, stack.master_key), plan_stack(str(SPEC))
    desired, keys = desired_teams(plan), dict(stack.up.keys)
    assert reconcile(admin, desired, keys) == []
    (retire,) = [block for block in code_blocks(OFFBOARDING.read_text()) if "tenantry_offboarded" in block]
    first_key, second_key = ("sk-" + secrets.token_urlsafe(24) for _ in range(2))
    try:
        assert _verbs(reconcile(admin, [*desired, _newcomer(desired, "wayne", "tenant-wayne")],
                                {**keys, "wayne": first_key})) == [("create-team", "wayne"), ("create-key", "wayne")]
        assert _verbs(reconcile(admin, desired, keys)) == [("block-team-keys", "wayne")]  # step 2
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", retire], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "GATEWAY": stack.url, "MASTER_KEY": stack.master_key, "TENANT": "wayne"})
        assert done.returncode == 0, done.stderr
        (retired,) = _teams_named(admin, "wayne")
        # The procedure's own date: a run across midnight would give yesterday's, so its form is what is checked.
        assert re.fullmatch(r"wayne-offboarded-\d{8}", retired["team_alias"]), retired
        record = retired["metadata"]["tenantry_offboarded"]
        assert record["cache_salt_digest"] == salt_digest("tenant-wayne"), retired["metadata"]
        info = admin.key_info(first_key)
        assert (info["key_alias"], info["blocked"]) == (f"{retired['team_alias']}-1", True), info
        assert reconcile(admin, desired, keys) == []  # the retired team is no longer the reconciler's

        with pytest.raises(SpecConflict, match=f"tenant wayne: its cache salt is the offboarded tenant's .team "
                                               f"{retired['team_alias']}"):
            reconcile(admin, [*desired, _newcomer(desired, "wayne", "tenant-wayne")], {**keys, "wayne": second_key})
        assert _verbs(reconcile(admin, [*desired, _newcomer(desired, "wayne", "tenant-wayne-2027")],
                                {**keys, "wayne": second_key})) == [("create-team", "wayne"), ("create-key", "wayne")]
        fresh = next(t for t in _teams_named(admin, "wayne") if t["team_alias"] == "wayne")
        assert fresh["team_id"] != retired["team_id"] and admin.key_info(second_key)["team_id"] == fresh["team_id"]
    finally:  # the stack as its spec has it
        wayne = _teams_named(admin, "wayne")
        for team in wayne:
            listed = admin.call("GET", f"/key/list?team_id={team['team_id']}&return_full_object=true")["keys"]
            if listed:
                admin.call("POST", "/key/delete", {"keys": [k["token"] for k in listed]})
        if wayne:
            admin.call("POST", "/team/delete", {"team_ids": [t["team_id"] for t in wayne]})
    assert reconcile(admin, desired, keys) == []
