"""The tenant-policy plugin's settings: what tenantry renders from the Plan for
every shipped stack is exactly what the plugin reads, and a key missing, unknown
or of the wrong type is refused when the plugin loads, with its path."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from tenantry.configs.litellm import tenant_policy_settings
from tenantry.stacks import STACKS_DIR, plan_stack
from tests.unit.policy_plugin import plugin, settings

SHIPPED = sorted(p.stem for p in STACKS_DIR.glob("*.yaml") if not p.name.startswith("Pulumi."))


def _as_json(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("stack", SHIPPED)
@pytest.mark.parametrize("where", ["local", "kubernetes"])
def test_what_tenantry_renders_for_every_shipped_stack_is_what_the_plugin_reads(stack, where):
    plan = plan_stack(stack)
    if where == "local":
        rendered = tenant_policy_settings(plan, metrics_urls={e.name: [f"http://e/{e.name}"] for e in plan.engines})
    else:
        rendered = tenant_policy_settings(plan, prometheus_url="http://prometheus:9090")
    parsed = settings.parse_settings(_as_json(rendered))
    assert _as_json(dataclasses.asdict(parsed)) == _as_json(rendered)  # nothing dropped, nothing changed


def _local():
    return _as_json(tenant_policy_settings(plan_stack("local")))


def _refusal(raw) -> str:
    with pytest.raises(settings.SettingsError) as refused:
        settings.parse_settings(raw)
    return str(refused.value)


def test_a_missing_key_is_refused_with_its_path():
    raw = _local()
    del raw["admission"]["wait_at_concurrency_limit_seconds"]
    assert _refusal(raw) == "admission.wait_at_concurrency_limit_seconds: missing"
    raw = _local()
    del raw["engines"]["tiny"]["metrics_urls"]
    assert _refusal(raw) == "engines.tiny.metrics_urls: missing"


def test_an_unknown_key_is_refused_with_its_path():
    raw = _local()
    raw["tenants"]["acme"]["max_tokens"] = 5
    assert _refusal(raw).startswith("tenants.acme.max_tokens: unknown key (expected tier, models, priority, ")


@pytest.mark.parametrize(("where", "value", "expected"), [
    (("engines", "tiny", "reserved", "acme"), "4", "engines.tiny.reserved.acme: must be an integer, got '4'"),
    (("tenants", "acme", "max_concurrency"), True, "tenants.acme.max_concurrency: must be an integer, got True"),
    (("tenants", "acme", "tier"), "gold", "tenants.acme.tier: must be one of 'guaranteed', 'best-effort', 'spot', "
                                          "got 'gold'"),
    (("admission", "metrics_max_age_seconds"), None, "admission.metrics_max_age_seconds: must be a number, got None"),
    (("engines", "tiny", "models"), "tiny", "engines.tiny.models: must be a list, got 'tiny'"),
    (("metrics",), [], "metrics: must be an object, got []"),
])
def test_a_value_of_the_wrong_type_is_refused_with_its_path(where, value, expected):
    raw = _local()
    parent = raw
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    assert _refusal(raw) == expected


def test_whole_numbers_are_read_as_numbers_where_the_plugin_wants_seconds():
    raw = _local()
    raw["admission"]["metrics_max_age_seconds"] = 10
    assert settings.parse_settings(raw).admission.metrics_max_age_seconds == 10.0


def test_the_plugin_reads_its_settings_once_at_start_and_refuses_a_bad_file_naming_it(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_local()), encoding="utf-8")
    raw = copy.deepcopy(_local())
    del raw["tenants"]["initech"]["cache_salt"]
    bad.write_text(json.dumps(raw), encoding="utf-8")
    monkeypatch.setenv("TENANTRY_POLICY_FILE", str(good))
    assert plugin.TenantPolicy().settings.tenants["initech"].tier == "spot"
    monkeypatch.setenv("TENANTRY_POLICY_FILE", str(bad))
    with pytest.raises(settings.SettingsError, match=f"^{bad}: tenants.initech.cache_salt: missing$"):
        plugin.TenantPolicy()
    monkeypatch.delenv("TENANTRY_POLICY_FILE")
    with pytest.raises(settings.SettingsError, match="TENANTRY_POLICY_FILE is not set"):
        plugin.TenantPolicy()
