"""Make LiteLLM's teams and keys match the spec. Idempotent.

Standard library only: on Kubernetes this file is mounted into the LiteLLM
image and run as a Job (`python3 reconciler.py`); the local stack imports
it. Inputs:

- TENANTRY_TEAMS: JSON file of desired teams (tenantry.configs.teams);
- TENANTRY_KEYS: JSON file {tenant: key}, the keys Pulumi generated (or the
  local stack did) and keeps as secrets;
- LITELLM_URL, and LITELLM_MASTER_KEY or LITELLM_MASTER_KEY_FILE (a file
  keeps the key out of the process environment).

For each desired team: create it, or update the fields that differ; make
sure its key exists (registered with the given value). Teams this
reconciler created earlier that the spec no longer names get their keys
blocked, not deleted, so spend history stays; each such key carries the
reconciler's block record in its metadata (BLOCK_RECORD), and only a key
with that record is unblocked when its tenant returns. A key blocked by
anyone else is revoked: it stays blocked, run after run, and the
reconciler says so (keep-revoked) until the tenant's key is replaced
(runbooks/procedures/rotate-a-tenant-key.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

MANAGED_BY = "tenantry"


class SpecConflict(Exception):
    """The spec asks for something LiteLLM's records forbid: the tenant and what to do."""

    def __init__(self, tenant: str, message: str):
        self.tenant = tenant
        super().__init__(f"tenant {tenant}: {message}")


class GatewayRefused(Exception):
    """LiteLLM answered an admin call with an error: the call, the status and LiteLLM's own message."""

    def __init__(self, method: str, path: str, status: int, message: str, tenant: str = ""):
        self.method, self.path, self.status, self.message, self.tenant = method, path, status, message, tenant
        who = f" for tenant {tenant}" if tenant else ""
        super().__init__(f"LiteLLM refused {method} {path.split('?')[0]}{who}: HTTP {status}: {message}")


def _refusal_message(error: urllib.error.HTTPError) -> str:
    body = error.read().decode("utf-8", "replace")
    try:
        detail = json.loads(body).get("error") or json.loads(body).get("detail") or body
    except (ValueError, AttributeError):
        return body.strip()[:300] or error.reason
    return str(detail.get("message", detail) if isinstance(detail, dict) else detail)[:300]
"""Teams carrying metadata.managed_by = tenantry are the reconciler's; it leaves others alone."""
BLOCK_RECORD = "tenantry_blocked"
"""The key metadata field the reconciler writes as it blocks a removed tenant's key (who and why): the one block
it may lift. A block without it is a revocation (a leaked key, an operator's decision), which it never lifts."""
OFFBOARDED = "tenantry_offboarded"
"""The team metadata field runbooks/procedures/offboard-a-tenant.md writes as it retires a tenant's team (renamed,
managed_by changed so the reconciler leaves it alone): when, and the digest of the tenant's cache salt, which no
later tenant may reuse (its prompts may still sit in the engines' prefix caches under that salt)."""
REVOKED_HINT = ("blocked outside the reconciler, so revoked: left blocked until the tenant's key is replaced "
                "(runbooks/procedures/rotate-a-tenant-key.md)")
TEAM_FIELDS = ("models", "tpm_limit", "rpm_limit", "max_budget", "budget_duration", "metadata")
KEY_FIELDS = ("max_parallel_requests", "allowed_routes")
"""LiteLLM keeps concurrency and the routes a key may call on keys, not teams: each tenant has one key."""


@dataclass(frozen=True)
class Action:
    verb: str
    """create-team, update-team, create-key, update-key, unblock-key, block-team-keys; keep-revoked changes
    nothing (the tenant's key is blocked and not by the reconciler) and is reported on every run"""
    tenant: str
    body: dict[str, Any]


def plan_actions(
    desired: list[dict[str, Any]],
    teams: list[dict[str, Any]],
    keys: dict[str, str],
    key_infos: dict[str, dict[str, Any] | None],
) -> list[Action]:
    """What to change. `teams` are LiteLLM's current teams; `key_infos` holds
    each tenant key's info from LiteLLM, or None when it does not exist yet.
    Each desired team carries its key's settings under `key`."""
    current = {t.get("team_alias"): t for t in teams}
    _refuse_reused_salts(desired, teams)
    actions: list[Action] = []
    for wanted in desired:
        team = {k: v for k, v in wanted.items() if k != "key"}
        key_settings = wanted.get("key", {})
        tenant = team["team_alias"]
        existing = current.get(tenant)
        if existing is None:
            actions.append(Action("create-team", tenant, team))
        else:
            changed = {f: team[f] for f in TEAM_FIELDS if _differs(existing.get(f), team[f])}
            if changed:
                actions.append(Action("update-team", tenant, {"team_id": existing["team_id"], **changed}))
        key = keys.get(tenant)
        if key is None:
            raise ValueError(f"no key for tenant {tenant}: the keys file must name every tenant")
        info = key_infos.get(tenant)
        if info is None:
            actions.append(Action("create-key", tenant, {"key": key, "key_alias": tenant, **key_settings,
                                                         "metadata": {"managed_by": MANAGED_BY}}))
            continue
        if info.get("blocked"):
            metadata = info.get("metadata") or {}
            if BLOCK_RECORD not in metadata:
                actions.append(Action("keep-revoked", tenant, {}))
                continue
            actions.append(Action("unblock-key", tenant, {
                "key": key, "metadata": {k: v for k, v in metadata.items() if k != BLOCK_RECORD}}))
        changed = {f: key_settings[f] for f in KEY_FIELDS if f in key_settings and _differs(info.get(f), key_settings[f])}
        if changed:
            actions.append(Action("update-key", tenant, {"key": key, **changed}))
    wanted = {t["team_alias"] for t in desired}
    for alias, team in current.items():
        if alias not in wanted and (team.get("metadata") or {}).get("managed_by") == MANAGED_BY:
            actions.append(Action("block-team-keys", str(alias), {"team_id": team["team_id"]}))
    return actions


def _refuse_reused_salts(desired: list[dict[str, Any]], teams: list[dict[str, Any]]) -> None:
    retired = {record["cache_salt_digest"]: str(team.get("team_alias"))
               for team in teams if isinstance(record := (team.get("metadata") or {}).get(OFFBOARDED), dict)
               and record.get("cache_salt_digest")}
    for wanted in desired:
        digest = (wanted.get("metadata") or {}).get("cache_salt_digest")
        if digest and digest in retired:
            raise SpecConflict(wanted["team_alias"], (
                f"its cache salt is the offboarded tenant's (team {retired[digest]}), whose prompts the engines may "
                "still hold under it: give it a salt of its own (tenants[].cache.salt), as "
                "runbooks/procedures/offboard-a-tenant.md says"))


def _differs(current: Any, wanted: Any) -> bool:
    if isinstance(wanted, list):
        return sorted(current or []) != sorted(wanted)
    if isinstance(wanted, dict):
        return any((current or {}).get(k) != v for k, v in wanted.items())
    if isinstance(wanted, float) and isinstance(current, (int, float)):
        return abs(current - wanted) > 1e-9
    return current != wanted


class LiteLLM:
    """The few admin endpoints the reconciler needs."""

    def __init__(self, url: str, master_key: str, timeout: float = 30):
        self.url, self.master_key, self.timeout = url.rstrip("/"), master_key, timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.master_key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - URL from our config
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise GatewayRefused(method, path, error.code, _refusal_message(error)) from None

    def wait_until_ready(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.call("GET", "/health/readiness")
                return
            except (GatewayRefused, urllib.error.URLError, OSError):  # not up yet, or not ready
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)

    def teams(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/team/list") or [])

    def key_info(self, key: str) -> dict[str, Any] | None:
        try:
            info = self.call("GET", f"/key/info?key={key}")
        except GatewayRefused as error:
            if error.status in (400, 404):
                return None
            raise
        return (info or {}).get("info") or {}

    def apply(self, action: Action, team_ids: dict[str, str]) -> None:
        if action.verb == "create-team":
            created = self.call("POST", "/team/new", action.body)
            team_ids[action.tenant] = created["team_id"]
        elif action.verb == "update-team":
            self.call("POST", "/team/update", action.body)
        elif action.verb == "create-key":
            self.call("POST", "/key/generate", {**action.body, "team_id": team_ids[action.tenant]})
        elif action.verb == "update-key":
            self.call("POST", "/key/update", action.body)
        elif action.verb == "unblock-key":
            # The record goes first: a key unblocked but still carrying it would be unblocked again after a
            # later revocation; one whose unblock failed without it stays blocked, the safe side.
            self.call("POST", "/key/update", action.body)
            self.call("POST", "/key/unblock", {"key": action.body["key"]})
        elif action.verb == "block-team-keys":
            for key in self.call("GET", f"/key/list?team_id={action.body['team_id']}&return_full_object=true").get("keys", []):
                token, metadata = (key.get("token"), key.get("metadata") or {}) if isinstance(key, dict) else (key, {})
                if key.get("blocked") if isinstance(key, dict) else False:
                    continue  # blocked already, by us or revoked: its record stays as it is
                record = {"by": "tenantry-reconciler", "reason": "tenant no longer in the spec"}
                self.call("POST", "/key/update", {"key": token, "metadata": {**metadata, BLOCK_RECORD: record}})
                self.call("POST", "/key/block", {"key": token})


def reconcile(client: LiteLLM, desired: list[dict[str, Any]], keys: dict[str, str]) -> list[Action]:
    teams = client.teams()
    infos = {tenant: client.key_info(key) for tenant, key in keys.items()}
    actions = plan_actions(desired, teams, keys, infos)
    team_ids = {t.get("team_alias"): t.get("team_id") for t in teams}
    for action in actions:
        try:
            client.apply(action, team_ids)
        except GatewayRefused as error:
            raise GatewayRefused(error.method, error.path, error.status, error.message + _hint(action, error),
                                 action.tenant) from None
    return actions


def _hint(action: Action, error: GatewayRefused) -> str:
    """What to do about the one refusal the reconciler can explain: the tenant's alias is taken by
    another key (its key was replaced outside the reconciler, or the keys file was lost while the
    database kept the old ones)."""
    if action.verb == "create-key" and "alias" in error.message and "exists" in error.message:
        return (f" (LiteLLM holds another key named {action.tenant}, not the one given for it: rename or "
                "block that key first, as runbooks/procedures/rotate-a-tenant-key.md does)")
    return ""


def main() -> int:
    with open(os.environ["TENANTRY_TEAMS"], encoding="utf-8") as f:
        desired = json.load(f)
    with open(os.environ["TENANTRY_KEYS"], encoding="utf-8") as f:
        keys = json.load(f)
    key_file = os.environ.get("LITELLM_MASTER_KEY_FILE")
    if key_file:
        with open(key_file, encoding="utf-8") as f:
            master_key = f.read().strip()
    else:
        master_key = os.environ["LITELLM_MASTER_KEY"]
    client = LiteLLM(os.environ["LITELLM_URL"], master_key)
    client.wait_until_ready(float(os.environ.get("TENANTRY_WAIT_SECONDS", "300")))
    try:
        actions = reconcile(client, desired, keys)
    except (GatewayRefused, SpecConflict) as error:
        print(f"reconciler: {error}", file=sys.stderr)
        return 1
    for action in actions:
        print(f"{action.verb} {action.tenant}" + (f": its key is {REVOKED_HINT}" if action.verb == "keep-revoked" else ""))
    print(f"reconciled {len(desired)} tenants, {len(actions)} changes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
