"""The alert and recording rules of every shipped stack: promtool accepts them,
every alert carries what on-call needs, every metric they read is exported by
a source or recorded, and the rules fire when (and only when) a tenant's or an
engine's contract is broken, as promtool's rule unit tests evaluate them
against synthetic series (Prometheus's own engine, not a re-implementation)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tenantry.monitoring import rules
from tenantry.monitoring.metrics import unknown_metrics
from tenantry.stacks import plan_stack

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
SEVERITIES = {"critical", "warning", "info"}


def _rules(stack: str) -> list[dict]:
    return [r for g in rules.rule_groups(plan_stack(stack)) for r in g["rules"]]


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # a bound for a hung promtool, not a judgement of its speed
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.parametrize("stack", STACKS)
def test_promtool_accepts_the_rule_file_of_every_stack(stack, tmp_path):
    (tmp_path / "rules.yml").write_text(rules.rule_file(plan_stack(stack)), encoding="utf-8")
    checked = _promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("stack", STACKS)
def test_every_alert_has_a_severity_a_summary_a_description_and_its_runbook(stack):
    plan = plan_stack(stack)
    for rule in (r for r in _rules(stack) if "alert" in r):
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        assert annotations["runbook_url"] == f"{plan.platform.runbook_base_url}/{rule['alert']}.md"
        assert (ROOT / "runbooks" / f"{rule['alert']}.md").is_file()


@pytest.mark.parametrize("stack", STACKS)
def test_every_metric_a_rule_reads_is_exported_or_recorded(stack):
    recorded = set(rules.RECORDS)
    problems = {r.get("alert") or r["record"]: unknown_metrics(r["expr"], recorded) for r in _rules(stack)}
    assert not {name: names for name, names in problems.items() if names}
    assert {r["record"] for r in _rules(stack) if "record" in r} <= recorded


def test_every_alert_of_the_table_is_raised_by_some_stack_and_no_other():
    raised = {r["alert"] for stack in STACKS for r in _rules(stack) if "alert" in r}
    assert raised == {a.name for a in rules.ALERTS}


def test_an_alert_threshold_comes_from_the_plan():
    by_engine = {r["labels"]["engine"]: r["expr"] for r in _rules("h100x8-shared-70b") if r.get("alert") == "EngineTtftHigh"}
    plan = plan_stack("h100x8-shared-70b")
    tightest = min(t.ttft_p95_ms for t in plan.tenants if t.name in plan.engines[0].tenants) / 1000
    assert by_engine[plan.engines[0].name].endswith(f"> {tightest:g}")


# --- promtool's rule unit tests: the rules as Prometheus evaluates them ------------------------------
# The rule file under test keeps every expression, `for` and label; annotations are dropped because
# promtool compares them verbatim, and they are templates checked above.

def _unit_test(tmp_path: Path, stack: str, tests: list[dict], evaluation_interval: str = "1m") -> None:
    """promtool evaluates every rule of the stack at each `evaluation_interval` up to the last eval_time: a
    test over a day's series takes a coarser step (a day at 1m took over two minutes on a loaded machine)."""
    groups = rules.rule_groups(plan_stack(stack))
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": evaluation_interval, "tests": tests}, sort_keys=False), encoding="utf-8")
    result = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _tenant_series(tenant: str, tier: str, engine: str, per_minute: int, missed: dict[str, int]) -> list[dict]:
    labels = f'tenant="{tenant}", tier="{tier}", engine="{engine}"'
    return [
        {"series": f"tenantry_tenant_requests_total{{{labels}}}", "values": f"0+{per_minute}x120"},
        *({"series": f'tenantry_tenant_slo_misses_total{{{labels}, objective="{o}"}}', "values": f"0+{n}x120"}
          for o, n in missed.items()),
    ]


def _gateway_series(team: str, per_minute: dict[str, int]) -> list[dict]:
    return [{"series": f'litellm_proxy_total_requests_metric_total{{team_alias="{team}", status_code="{status}"}}',
             "values": f"0+{n}x120"} for status, n in per_minute.items()]


def test_a_latency_burn_is_judged_on_the_tenant_over_all_its_engines(tmp_path):
    """A fallback engine's trickle (micro: 2 of 2 requests a minute missing) inside a tenant's healthy traffic
    (tiny: 18 a minute, none missing) is a 10 % burn: no page, where the rule per engine paged micro's 100 %."""
    series = [*_tenant_series("acme", "guaranteed", "tiny", 18, {"ttft": 0, "itl": 0, "any": 0}),
              *_tenant_series("acme", "guaranteed", "micro", 2, {"ttft": 2, "itl": 0, "any": 2})]
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "30m", "alertname": "TenantTtftBudgetBurnFast", "exp_alerts": []}]}])


def test_a_quiet_tenants_few_slow_requests_do_not_page_and_a_total_outage_pages_within_minutes(tmp_path):
    """2 slow of 3 requests in ten minutes is under the traffic floor; a tenant sending 5 a minute whose every
    request misses from minute 0 is paged by minute 11 (the workbook's 1h/5m pair needed 45)."""
    quiet = _tenant_series("acme", "guaranteed", "tiny", 0, {"ttft": 0, "itl": 0, "any": 0})
    quiet[0]["values"], quiet[1]["values"] = "0 1 1 2 2 3x115", "0 1 1 1 1 2x115"
    outage = _tenant_series("globex", "best-effort", "tiny", 5, {"ttft": 5, "itl": 0, "any": 5})
    globex = {"severity": "critical", "tenant": "globex", "tier": "best-effort", "objective": "ttft"}
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": [*quiet, *outage], "alert_rule_test": [
        {"eval_time": "11m", "alertname": "TenantTtftBudgetBurnFast", "exp_alerts": [{"exp_labels": globex}]},
        {"eval_time": "60m", "alertname": "TenantTtftBudgetBurnFast", "exp_alerts": [{"exp_labels": globex}]}]}])


def test_a_fast_latency_burn_pages_only_the_tenant_missing_its_objective(tmp_path):
    # acme misses TTFT on 9 of 10 requests (burn 18 > 14.4); globex on 1 of 10 (burn 2: not fast).
    series = [*_tenant_series("acme", "guaranteed", "tiny", 10, {"ttft": 9, "itl": 0, "any": 9}),
              *_tenant_series("globex", "best-effort", "tiny", 10, {"ttft": 1, "itl": 0, "any": 1})]
    acme = {"severity": "critical", "tenant": "acme", "tier": "guaranteed", "objective": "ttft"}
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "70m", "alertname": "TenantTtftBudgetBurnFast", "exp_alerts": [{"exp_labels": acme}]},
        {"eval_time": "70m", "alertname": "TenantItlBudgetBurnFast", "exp_alerts": []},
    ]}])


def test_errors_and_429s_are_judged_against_each_tenants_own_contract(tmp_path):
    # acme allows 1 % errors (15 % burns it 15 times, past 14.4) and, guaranteed, 1 % of 429s; globex allows 5 %
    # (15 % burns it 3 times) and is best-effort.
    series = [*_gateway_series("acme", {"200": 83, "500": 15, "429": 2}),
              *_gateway_series("globex", {"200": 35, "500": 15, "429": 50})]
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "30m", "alertname": "TenantErrorRateHigh",
         "exp_alerts": [{"exp_labels": {"severity": "critical", "tenant": "acme", "tier": "guaranteed"}}]},
        {"eval_time": "30m", "alertname": "TenantGuaranteedThrottled", "exp_alerts": [{"exp_labels": {
            "severity": "warning", "tenant": "acme", "tier": "guaranteed", "cause": "its own limits"}}]},
    ]}])


def test_budget_alerts_fire_at_each_share_with_its_severity(tmp_path):
    # acme's budget is 5 USD: 4.2 spent is 84 %, past 50 % and 80 %, short of 95 %.
    series = [{"series": 'litellm_team_max_budget_metric{team_alias="acme", team="t1"}', "values": "5x30"},
              {"series": 'litellm_remaining_team_budget_metric{team_alias="acme", team="t1"}', "values": "0.8x30"}]
    who = {"tenant": "acme", "tier": "guaranteed"}
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "10m", "alertname": "TenantBudgetSpent", "exp_alerts": [
            {"exp_labels": {**who, "severity": "info", "threshold": "0.5"}},
            {"exp_labels": {**who, "severity": "warning", "threshold": "0.8"}}]},
    ]}])


def test_a_showback_tenant_is_measured_against_its_budget_not_its_gateway_cap(tmp_path):
    # The tests' stack: trial's budget is 0.00002 USD under showback, its gateway cap 1000 times that (0.02).
    # 0.00003 spent is 150 % of the budget (every level fires), though 99.85 % of the cap is left. thrifty,
    # chargeback, is measured against its cap as before: 0.00001 of 0.00002 spent, 50 %, info only.
    series = [{"series": 'litellm_team_max_budget_metric{team_alias="trial", team="t5"}', "values": "0.02x30"},
              {"series": 'litellm_remaining_team_budget_metric{team_alias="trial", team="t5"}', "values": "0.01997x30"},
              {"series": 'litellm_team_max_budget_metric{team_alias="thrifty", team="t4"}', "values": "0.00002x30"},
              {"series": 'litellm_remaining_team_budget_metric{team_alias="thrifty", team="t4"}',
               "values": "0.00001x30"}]
    trial, thrifty = {"tenant": "trial", "tier": "best-effort"}, {"tenant": "thrifty", "tier": "spot"}
    _unit_test(tmp_path, "tests/local/stack.yaml", [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": "round(tenantry:tenant_budget_spent:ratio, 0.001)", "eval_time": "10m",
         "exp_samples": [{"labels": '{tenant="trial"}', "value": 1.5}, {"labels": '{tenant="thrifty"}', "value": 0.5}]},
    ], "alert_rule_test": [
        {"eval_time": "10m", "alertname": "TenantBudgetSpent", "exp_alerts": [
            {"exp_labels": {**thrifty, "severity": "info", "threshold": "0.5"}},
            {"exp_labels": {**trial, "severity": "info", "threshold": "0.5"}},
            {"exp_labels": {**trial, "severity": "warning", "threshold": "0.8"}},
            {"exp_labels": {**trial, "severity": "critical", "threshold": "0.95"}}]},
    ]}])


def _minutes(value, until: int = 50) -> str:
    return " ".join(f"{value(m):.6g}" for m in range(until + 1))


def test_a_budget_page_ends_with_the_window_on_replicas_that_served_nothing_since(tmp_path):
    """Issue 35, item 9: LiteLLM sets a team's budget gauges only on the replica that served it, so a replica
    idle since before the window's reset keeps 96 % spent. acme's window resets at minute 30; after it gw-1
    serves acme again (2 % spent) and gw-0 nothing: acme's page must end, and globex's, which nobody served
    since, too. Before the reset both page."""
    def replica(team: str, alias: str, instance: str, spend, remaining, hours) -> list[dict]:
        labels = f'team_alias="{alias}", team="{team}", instance="{instance}"'
        cap = 5 if alias == "acme" else 2
        return [{"series": f"litellm_spend_metric_total{{{labels}, model=\"tiny\"}}", "values": _minutes(spend)},
                {"series": f"litellm_team_max_budget_metric{{{labels}}}", "values": _minutes(lambda m: cap)},
                {"series": f"litellm_remaining_team_budget_metric{{{labels}}}", "values": _minutes(remaining)},
                {"series": f"litellm_team_budget_remaining_hours_metric{{{labels}}}", "values": _minutes(hours)}]

    before = lambda m: (30 - min(m, 29)) / 60  # noqa: E731 - the hours to the reset, as last set by minute 29
    idle_after_29 = lambda m: 0.01 * min(m, 29)  # noqa: E731
    series = [*replica("t1", "acme", "gw-0", idle_after_29, lambda m: 0.2, before),
              *replica("t1", "acme", "gw-1", lambda m: 0.01 * min(m, 29) + 0.01 * max(0, m - 31),
                       lambda m: 0.2 if m < 32 else 4.9, lambda m: before(m) if m < 32 else 24 - (m - 30) / 60),
              *replica("t2", "globex", "gw-0", idle_after_29, lambda m: 0.05, before),
              *replica("t2", "globex", "gw-1", idle_after_29, lambda m: 0.05, before)]
    critical = lambda tenant, tier: {"tenant": tenant, "tier": tier, "severity": "critical", "threshold": "0.95"}  # noqa: E731
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": "round(tenantry:tenant_budget_spent:ratio, 0.001)", "eval_time": "40m",
         "exp_samples": [{"labels": '{tenant="acme"}', "value": 0.02}]},
    ], "alert_rule_test": [
        {"eval_time": "28m", "alertname": "TenantBudgetSpent", "exp_alerts": [
            {"exp_labels": critical("acme", "guaranteed")}, {"exp_labels": critical("globex", "best-effort")},
            *({"exp_labels": {"tenant": t, "tier": tier, "severity": level, "threshold": share}}
              for t, tier in (("acme", "guaranteed"), ("globex", "best-effort"))
              for level, share in (("info", "0.5"), ("warning", "0.8")))]},
        {"eval_time": "40m", "alertname": "TenantBudgetSpent", "exp_alerts": []},
    ]}])


def test_a_budget_changed_is_read_from_the_replica_that_served_since(tmp_path):
    """The share comes from one replica's gauges, the one that served last, never one replica's spend against
    another's cap: acme's budget lowered from 50 to 5 USD, served since by gw-1 only (4.25 of 5 spent, 85 %) while
    gw-0 keeps 50 and 45.75 left, warns; globex's raised from 2 to 20 USD (1.7 spent, 8.5 %) while gw-0 keeps
    2 and 0.3 left (85 %), does not. Mixing replicas read acme at 8.5 % and globex at 98.5 %."""
    def replica(alias: str, instance: str, spends: bool, cap: float, left: float) -> list[dict]:
        labels = f'team_alias="{alias}", team="t-{alias}", instance="{instance}"'
        return [{"series": f"litellm_spend_metric_total{{{labels}, model=\"tiny\"}}",
                 "values": _minutes(lambda m: 0.01 * m if spends else 0.0)},
                {"series": f"litellm_team_max_budget_metric{{{labels}}}", "values": _minutes(lambda m: cap)},
                {"series": f"litellm_remaining_team_budget_metric{{{labels}}}", "values": _minutes(lambda m: left)},
                {"series": f"litellm_team_budget_remaining_hours_metric{{{labels}}}", "values": _minutes(lambda m: 20)}]

    series = [*replica("acme", "gw-0", False, 50, 45.75), *replica("acme", "gw-1", True, 5, 0.75),
              *replica("globex", "gw-0", False, 2, 0.3), *replica("globex", "gw-1", True, 20, 18.3)]
    warning = {"tenant": "acme", "tier": "guaranteed", "severity": "warning", "threshold": "0.8"}
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": "round(tenantry:tenant_budget_spent:ratio, 0.001)", "eval_time": "20m",
         "exp_samples": [{"labels": '{tenant="acme"}', "value": 0.85}, {"labels": '{tenant="globex"}', "value": 0.085}]},
    ], "alert_rule_test": [
        {"eval_time": "20m", "alertname": "TenantBudgetSpent", "exp_alerts": [
            {"exp_labels": {**warning, "severity": "info", "threshold": "0.5"}}, {"exp_labels": warning}]},
    ]}])


def test_a_spend_rate_that_outruns_the_budget_is_projected(tmp_path):
    # 0.6 USD an hour with 10 hours to the reset and 2 USD left: 4 USD short.
    series = [{"series": 'litellm_spend_metric_total{team_alias="globex", model="tiny"}', "values": "0+0.01x150"},
              {"series": 'litellm_team_budget_remaining_hours_metric{team_alias="globex", team="t2"}', "values": "10x150"},
              {"series": 'litellm_remaining_team_budget_metric{team_alias="globex", team="t2"}', "values": "2x150"}]
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "140m", "alertname": "TenantBudgetExhaustionProjected",
         "exp_alerts": [{"exp_labels": {"severity": "warning", "tenant": "globex", "tier": "best-effort"}}]},
    ]}])


def test_an_engine_down_or_never_scraped_is_down(tmp_path):
    series = [{"series": 'up{job="tiny", instance="127.0.0.1:18110"}', "values": "1 1 0x10"}]
    labels = {"severity": "critical", "pool": "local"}
    _unit_test(tmp_path, "local", [{"interval": "1m", "input_series": series, "alert_rule_test": [
        # micro was never scraped (absent); tiny answered, then stopped at 2m and stays down past `for`.
        {"eval_time": "2m", "alertname": "EngineDown", "exp_alerts": [
            {"exp_labels": {**labels, "engine": "micro", "job": "micro"}}]},
        {"eval_time": "5m", "alertname": "EngineDown", "exp_alerts": [
            {"exp_labels": {**labels, "engine": "tiny", "job": "tiny"}},
            {"exp_labels": {**labels, "engine": "micro", "job": "micro"}}]},
    ]}])


def test_a_pool_short_of_ready_gpus_alerts_and_a_cluster_without_kube_state_metrics_does_not(tmp_path):
    plan = plan_stack("h100x8-shared-70b")
    pool = plan.pools[0].name
    node = 'node="gpu-0"'
    series = [
        {"series": f'kube_node_labels{{{node}, label_node_restriction_kubernetes_io_tenantry_pool="{pool}"}}', "values": "1x30"},
        {"series": f'kube_node_status_allocatable{{{node}, resource="nvidia_com_gpu", unit="integer"}}', "values": "8x30"},
        {"series": f'kube_node_status_condition{{{node}, condition="Ready", status="true"}}', "values": "1x10 0x20"},
    ]
    alert = {"severity": "critical", "pool": pool, "resource": "nvidia.com/gpu", "needed": "8"}
    _unit_test(tmp_path, "h100x8-shared-70b", [
        {"interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": "9m", "alertname": "NodePoolGpusMissing", "exp_alerts": []},
            {"eval_time": "25m", "alertname": "NodePoolGpusMissing", "exp_alerts": [{"exp_labels": alert}]}]},
        {"interval": "1m", "input_series": [{"series": 'up{job="x"}', "values": "1x30"}], "alert_rule_test": [
            {"eval_time": "25m", "alertname": "NodePoolGpusMissing", "exp_alerts": []}]},
    ])
