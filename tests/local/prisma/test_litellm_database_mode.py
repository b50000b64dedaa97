"""LiteLLM in database mode through the bridge: teams, keys, spend, budgets,
rate limits and restarts, as the real proxy drives them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.local.prisma.harness import LiteLLM, Postgres, alive, cost, wait_until


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
