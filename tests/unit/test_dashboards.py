"""The dashboards every stack renders: valid Grafana models whose every query parses and uses only
metrics that exist (exported by an engine, the gateway or an exporter, or recorded by our rules)."""

from __future__ import annotations

import json
import shutil
import subprocess

import promql_parser
import pytest
import yaml
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from tenantry.monitoring.dashboards import dashboards, expand, gpu_equivalents, panels
from tenantry.monitoring.label_flow import LabelFlow, rule_problems
from tenantry.monitoring.metrics import metric_names, unknown_metrics
from tenantry.monitoring.rules import RECORDS, rule_groups
from tenantry.stacks import STACKS_DIR, plan_stack

STACKS = sorted(path.stem for path in STACKS_DIR.glob("*.yaml") if not path.name.startswith("Pulumi."))


@pytest.fixture(scope="module", params=STACKS)
def rendered(request):
    plan = plan_stack(request.param)
    return plan, dashboards(plan)


def queries(plan, models):
    """(dashboard, panel title, PromQL as Grafana sends it for the plan's first tenant)."""
    tenant = plan.tenants[0].name
    return [(name, panel["title"], expand(target["expr"], tenant=tenant))
            for name, model in models.items() for panel in panels(model) for target in panel["targets"]]


def test_every_stack_renders_the_three_dashboards(rendered):
    _, models = rendered
    assert sorted(models) == ["tenantry-cost.json", "tenantry-platform.json", "tenantry-tenant.json"]


def test_dashboards_are_grafana_models_the_sdk_reads_back(rendered):
    register_default_plugins()
    _, models = rendered
    for name, model in models.items():
        text = json.dumps(model)
        decoded = DashboardModel.from_json(json.loads(text))
        assert decoded.uid == model["uid"] == name.removesuffix(".json"), name
        assert model["schemaVersion"] >= 39, name
        assert decoded.panels, name


def test_panel_ids_and_titles_are_unique_within_each_dashboard(rendered):
    _, models = rendered
    for name, model in models.items():
        every = [*model["panels"], *(nested for row in model["panels"] for nested in row.get("panels", []))]
        ids = [panel["id"] for panel in every]
        titles = [panel["title"] for panel in every]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids {sorted(ids)}"
        assert len(titles) == len(set(titles)), f"{name}: duplicate panel titles {sorted(titles)}"


def test_every_panel_queries_the_datasource_variable_with_unique_ref_ids(rendered):
    _, models = rendered
    for name, model in models.items():
        for panel in panels(model):
            refs = [target["refId"] for target in panel["targets"]]
            assert refs and len(refs) == len(set(refs)), f"{name} / {panel['title']}: refIds {refs}"
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]


def test_every_query_parses_with_its_variables_substituted(rendered):
    plan, models = rendered
    for name, title, expr in queries(plan, models):
        assert "$" not in expr.replace('"$1"', ""), f"{name} / {title}: a variable left in {expr}"
        try:
            promql_parser.parse(expr)
        except ValueError as error:
            pytest.fail(f"{name} / {title}: {error}: {expr}")


def test_every_metric_a_query_reads_is_in_the_catalog_or_recorded_by_the_rules(rendered):
    plan, models = rendered
    for name, title, expr in queries(plan, models):
        unknown = unknown_metrics(expr, recorded=set(RECORDS))
        assert not unknown, f"{name} / {title}: {sorted(unknown)} is neither exported nor recorded"


def test_every_label_a_query_reads_is_carried_by_its_series(rendered):
    """As for the rules (tests/unit/test_metric_labels.py): a panel grouping or matching on a label its series
    lack draws one blank line, or none."""
    plan, models = rendered
    flow = LabelFlow()
    rule_problems([r for g in rule_groups(plan) for r in g["rules"]], flow)
    for name, title, expr in queries(plan, models):
        flow.result(expr, f"{name} / {title}")
    assert flow.problems == []


def test_every_recording_rule_a_query_reads_is_one_the_plans_rule_file_records(rendered):
    plan, models = rendered
    recorded_here = {rule["record"] for group in rule_groups(plan) for rule in group["rules"] if "record" in rule}
    for name, title, expr in queries(plan, models):
        missing = {m for m in metric_names(expr) if m.startswith("tenantry:")} - recorded_here
        assert not missing, f"{name} / {title}: {sorted(missing)} is not recorded for stack {plan.stack}"


def test_the_tenant_variable_lists_every_tenant_of_the_plan(rendered):
    plan, models = rendered
    variable = next(v for v in models["tenantry-tenant.json"]["templating"]["list"] if v["name"] == "tenant")
    assert variable["type"] == "custom"
    assert variable["query"].split(",") == [t.name for t in plan.tenants]
    assert [o["value"] for o in variable["options"]] == [t.name for t in plan.tenants]


def test_the_dashboards_cover_what_on_call_and_platform_teams_read(rendered):
    _, models = rendered
    titles = {name: {panel["title"] for panel in panels(model)} for name, model in models.items()}
    assert {"Requests running", "Requests waiting", "KV-cache usage", "Preemptions", "Tokens per second",
            "LoRA adapters in use", "Admissions and sheds by reason", "Tenant-policy plugin latency",
            "GPU utilisation per pool", "GPU power per pool"} <= titles["tenantry-platform.json"]
    assert {"Time to first token p95 vs objective", "Error budget left (3 days)", "Tokens per second",
            "Admissions, 429s and refusals by reason", "Spend and projection vs budget",
            "Prefix-cache reuse"} <= titles["tenantry-tenant.json"]
    assert {"Spend per tenant, engine and hardware class", "GPU-hours attributed", "Effective utilisation per engine",
            "Top consumers"} <= titles["tenantry-cost.json"]


def test_per_tenant_panels_select_the_tenant_variable(rendered):
    _, models = rendered
    for panel in panels(models["tenantry-tenant.json"]):
        for target in panel["targets"]:
            assert '"$tenant"' in target["expr"], f"{panel['title']}: {target['expr']}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_every_query_as_a_recording_rule(rendered, tmp_path):
    plan, models = rendered
    rules = [{"record": f"dashboard:query_{n}", "expr": expr} for n, (_, _, expr) in enumerate(queries(plan, models))]
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    check = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_gpu_shares_and_sustainable_tokens_come_from_the_plan():
    plan = plan_stack("h100-mig-mixed")
    cost = dashboards(plan)["tenantry-cost.json"]
    exprs = {panel["title"]: panel["targets"][0]["expr"] for panel in panels(cost)}
    for engine in plan.engines:
        assert f'vector({engine.tokens.sustainable_tpm / 60:g}), "model_name", "{engine.name}"' in \
            exprs["Effective utilisation per engine"]
        assert f'vector({gpu_equivalents(plan, engine):g}), "engine", "{engine.name}"' in exprs["GPU-hours attributed"]
    by_engine = {engine.name: gpu_equivalents(plan, engine) for engine in plan.engines}
    assert by_engine["llama-70b"] == 8  # two replicas of four whole GPUs
    assert by_engine["qwen-7b"] == pytest.approx(4)  # eight 3g.40gb slices, half a GPU each
