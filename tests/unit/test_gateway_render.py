"""What the gateway is configured with, rendered from the Plan, and the
reconciler's decisions (its HTTP side runs against a real LiteLLM in the
local-stack tests)."""

from __future__ import annotations

import pytest

from tenantry.gateway.reconciler import BLOCK_RECORD, MANAGED_BY, OFFBOARDED, Action, SpecConflict, plan_actions
from tenantry.configs.litellm import litellm_config, tenant_policy_settings
from tenantry.configs.teams import SPEND_VIEW_ROUTES, TENANT_ROUTES, desired_teams, salt_digest
from tenantry.configs.vllm import vllm_args
from tenantry.stacks import plan_stack


def test_litellm_config_has_every_engine_and_adapter_priced_from_the_plan():
    plan = plan_stack("local")
    config = litellm_config(plan, api_base=lambda e: f"http://127.0.0.1/{e.name}")
    names = [m["model_name"] for m in config["model_list"]]
    assert names == ["tiny", "acme-support", "globex-legal", "micro"]
    tiny = plan.engine("tiny")
    adapter = next(m for m in config["model_list"] if m["model_name"] == "acme-support")
    assert adapter["litellm_params"] == {
        "model": "hosted_vllm/acme-support", "api_base": "http://127.0.0.1/tiny",
        "input_cost_per_token": tiny.tokens.usd_per_1k_input_tokens / 1000,
        "output_cost_per_token": tiny.tokens.usd_per_1k_output_tokens / 1000,
    }
    # stacks/local.yaml lets tiny's adapters fall back with it (include_adapters).
    assert config["router_settings"]["fallbacks"] == [{"tiny": ["micro"]}, {"acme-support": ["micro"]},
                                                      {"globex-legal": ["micro"]}]
    assert config["router_settings"]["num_retries"] == 0  # to the fallback at once
    assert config["router_settings"]["disable_cooldowns"] is True  # no failure takes a model out for every tenant
    assert "master_key" in config["general_settings"] and "sk-" not in str(config)


def test_adapters_fall_back_with_their_engine_only_when_the_spec_says_so(tmp_path):
    import yaml

    spec = yaml.safe_load(open("stacks/local.yaml").read())
    spec["gateway"]["fallbacks"][0].pop("include_adapters")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    plan = plan_stack(str(tmp_path / "s.yaml"))
    assert plan.gateway.fallbacks[0].adapters == ()
    assert litellm_config(plan, api_base=lambda e: "x")["router_settings"]["fallbacks"] == [{"tiny": ["micro"]}]


def test_policy_settings_carry_tiers_salts_and_reservations():
    plan = plan_stack("local")
    settings = tenant_policy_settings(plan)
    assert settings["tenants"]["acme"] == {
        "tier": "guaranteed", "models": ["tiny", "acme-support", "micro"], "priority": 0, "cache_salt": "tenant-acme",
        "max_concurrency": 4, "max_prompt_tokens": None, "max_output_tokens": None,
        "ttft_objective_seconds": 2.0, "itl_objective_seconds": 0.25,  # stacks/local.yaml's acme: 2000 ms, 250 ms
        "overload_fallback": [],
    }
    assert settings["tenants"]["initech"]["cache_salt"] is None
    assert settings["engines"]["tiny"]["reserved"] == {"acme": 4}
    assert settings["admission"]["shed_spot_at_waiting"] == 1
    assert settings["admission"]["wait_at_concurrency_limit_seconds"] == 0.25
    # Every key is written, so the plugin needs no default of its own.
    assert settings["metrics"] == {"cache_seconds": 1.0, "timeout_seconds": 1.0, "prometheus_url": None}
    # The one rule and LiteLLM's own team check read the same list.
    assert {t: s["models"] for t, s in settings["tenants"].items()} == {
        team["team_alias"]: team["models"] for team in desired_teams(plan)}
    assert tenant_policy_settings(plan, prometheus_url="http://p:9090")["metrics"]["prometheus_url"] == "http://p:9090"


def test_cpu_engines_get_cpu_arguments_and_the_plans_kv_cache_size():
    tiny = plan_stack("local").engine("tiny")
    args = vllm_args(tiny, model="/m", adapter_dir="/a")
    assert args[args.index("--block-size") + 1] == "32" and "--enforce-eager" in args
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(tiny.memory.kv_bytes)
    big = plan_stack("h100x8-shared-70b").engine("llama-70b")
    assert "--enforce-eager" not in vllm_args(big, model="m", adapter_dir="/a")


def test_desired_teams():
    teams = desired_teams(plan_stack("local"))
    acme = next(t for t in teams if t["team_alias"] == "acme")
    assert acme == {
        "team_alias": "acme", "models": ["tiny", "acme-support", "micro"], "tpm_limit": 12000, "rpm_limit": 120,
        "max_budget": 5.0, "budget_duration": "1d",
        "metadata": {"managed_by": MANAGED_BY, "tier": "guaranteed", "stack": "local", "budget_usd": 5.0,
                     "budget_mode": "chargeback", "cache_salt_digest": salt_digest("tenant-acme")},
        # Concurrency is the plugin's: a key's own limit is cleared. The key calls the inference API and reads its
        # own spend.
        "key": {"max_parallel_requests": None, "allowed_routes": [*TENANT_ROUTES, "/key/info", "/team/info"]},
    }
    assert "/model/info" not in TENANT_ROUTES and "/health" not in TENANT_ROUTES and "/key/info" not in TENANT_ROUTES


def test_a_showback_tenants_gateway_cap_is_a_runaway_guard_and_its_metadata_holds_the_budget():
    teams = {t["team_alias"]: t for t in desired_teams(plan_stack("tests/local/stack.yaml"))}
    assert teams["trial"]["max_budget"] == pytest.approx(0.00002 * 1000)
    assert teams["trial"]["metadata"]["budget_usd"] == 0.00002 and teams["trial"]["metadata"]["budget_mode"] == "showback"
    assert teams["thrifty"]["max_budget"] == 0.00002 and teams["thrifty"]["metadata"]["budget_mode"] == "chargeback"


ROUTES = [*TENANT_ROUTES, *SPEND_VIEW_ROUTES]


def test_a_key_limit_left_from_before_is_cleared():
    desired = desired_teams(plan_stack("local"))
    teams = [{**{k: v for k, v in t.items() if k != "key"}, "team_id": f"id-{t['team_alias']}"} for t in desired]
    infos = {t["team_alias"]: {"blocked": None, "max_parallel_requests": None, "allowed_routes": ROUTES}
             for t in desired}
    infos["acme"]["max_parallel_requests"] = 4
    keys = {t["team_alias"]: f"sk-{t['team_alias']}" for t in desired}
    assert plan_actions(desired, teams, keys, infos) == [
        Action("update-key", "acme", {"key": "sk-acme", "max_parallel_requests": None})]


def test_a_key_made_before_routes_were_restricted_gets_the_tenant_routes():
    desired = desired_teams(plan_stack("local"))
    teams = [{**{k: v for k, v in t.items() if k != "key"}, "team_id": f"id-{t['team_alias']}"} for t in desired]
    infos = {t["team_alias"]: {"blocked": None, "max_parallel_requests": None,
                               "allowed_routes": list(reversed(ROUTES))} for t in desired}  # order is no change
    infos["globex"]["allowed_routes"] = []  # LiteLLM's default: every route the key's role allows
    keys = {t["team_alias"]: f"sk-{t['team_alias']}" for t in desired}
    assert plan_actions(desired, teams, keys, infos) == [
        Action("update-key", "globex", {"key": "sk-globex", "allowed_routes": ROUTES})]


DESIRED = [{"team_alias": "a", "models": ["m"], "tpm_limit": 10, "rpm_limit": 1,
            "max_budget": 5.0, "budget_duration": "1d", "metadata": {"managed_by": MANAGED_BY, "tier": "spot"},
            "key": {"max_parallel_requests": 2}}]
TEAM = {k: v for k, v in DESIRED[0].items() if k != "key"}
ACTIVE = {"a": {"blocked": None, "max_parallel_requests": 2}}


def test_reconciler_creates_what_is_missing():
    actions = plan_actions(DESIRED, teams=[], keys={"a": "sk-a"}, key_infos={"a": None})
    assert [a.verb for a in actions] == ["create-team", "create-key"]
    assert "key" not in actions[0].body
    assert actions[1].body == {"key": "sk-a", "key_alias": "a", "max_parallel_requests": 2,
                               "metadata": {"managed_by": MANAGED_BY}}


def test_reconciler_changes_nothing_when_in_step():
    current = [{**TEAM, "team_id": "t1", "max_budget": 5, "metadata": {**TEAM["metadata"], "extra": 1}}]
    assert plan_actions(DESIRED, current, {"a": "sk-a"}, ACTIVE) == []


def test_reconciler_updates_only_what_differs_and_lifts_its_own_block():
    current = [{**TEAM, "team_id": "t1", "tpm_limit": 99}]
    blocked_by_it = {"blocked": True, "max_parallel_requests": 9,
                     "metadata": {"managed_by": MANAGED_BY, BLOCK_RECORD: {"by": "tenantry-reconciler"}}}
    actions = plan_actions(DESIRED, current, {"a": "sk-a"}, {"a": blocked_by_it})
    assert actions == [Action("update-team", "a", {"team_id": "t1", "tpm_limit": 10}),
                       Action("unblock-key", "a", {"key": "sk-a", "metadata": {"managed_by": MANAGED_BY}}),
                       Action("update-key", "a", {"key": "sk-a", "max_parallel_requests": 2})]


def test_reconciler_never_lifts_a_block_it_did_not_set():
    """A key blocked by hand (leaked, revoked) stays blocked on every run; the run says so (issue 35, item 11)."""
    revoked = {"blocked": True, "max_parallel_requests": 9, "metadata": {"managed_by": MANAGED_BY}}
    actions = plan_actions(DESIRED, [{**TEAM, "team_id": "t1"}], {"a": "sk-a"}, {"a": revoked})
    assert actions == [Action("keep-revoked", "a", {})]


def test_reconciler_blocks_keys_of_removed_tenants_but_not_foreign_teams():
    current = [{**TEAM, "team_id": "t1"},
               {"team_alias": "gone", "team_id": "t2", "metadata": {"managed_by": MANAGED_BY}},
               {"team_alias": "someone-else", "team_id": "t3", "metadata": {}}]
    actions = plan_actions(DESIRED, current, {"a": "sk-a"}, ACTIVE)
    assert actions == [Action("block-team-keys", "gone", {"team_id": "t2"})]


def test_a_tenant_reusing_an_offboarded_tenants_cache_salt_is_refused_with_what_to_do():
    """A name offboarded and reused gets a fresh team (the old one was renamed), but the default salt would be
    the old tenant's (issue 35, item 14)."""
    retired = {"team_alias": "a-offboarded-20261207", "team_id": "t9",
               "metadata": {"managed_by": "tenantry-offboarded",
                            OFFBOARDED: {"at": "2026-12-07", "cache_salt_digest": salt_digest("tenant-a")}}}
    reused = [{**DESIRED[0], "metadata": {**TEAM["metadata"], "cache_salt_digest": salt_digest("tenant-a")}}]
    with pytest.raises(SpecConflict, match="tenant a: its cache salt is the offboarded tenant's .team "
                       "a-offboarded-20261207.*tenants\\[\\]\\.cache\\.salt"):
        plan_actions(reused, [retired], {"a": "sk-a"}, {"a": None})
    renewed = [{**DESIRED[0], "metadata": {**TEAM["metadata"], "cache_salt_digest": salt_digest("tenant-a-2")}}]
    assert [a.verb for a in plan_actions(renewed, [retired], {"a": "sk-a"}, {"a": None})] == \
        ["create-team", "create-key"]


def test_reconciler_needs_every_key():
    with pytest.raises(ValueError, match="no key for tenant a"):
        plan_actions(DESIRED, [], {}, {})


def test_engines_keep_an_idle_connection_longer_than_any_client_of_theirs():
    """The client must close an idle keep-alive connection first: a server closing it as the client reuses it
    fails that request with "Connection reset by peer". LiteLLM's pool keeps one 15 s; Envoy (kv-aware engines)
    an hour by default; vLLM's own server would close at 5 s."""
    from tenantry.configs.litellm import GATEWAY_ENVIRONMENT
    from tenantry.configs.vllm import ENGINE_ENVIRONMENT

    engine_keeps = int(ENGINE_ENVIRONMENT["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"])
    assert int(GATEWAY_ENVIRONMENT["AIOHTTP_KEEPALIVE_TIMEOUT"]) == 15 < engine_keeps
    assert engine_keeps > 3600  # Envoy's upstream idle timeout, unless a DestinationRule sets one
    # The gateway's own server, for its clients: beyond the usual load balancers' 60 s idle timeout.
    assert int(GATEWAY_ENVIRONMENT["KEEPALIVE_TIMEOUT"]) > 60
