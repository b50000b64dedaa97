"""Grafana dashboards from the Plan: the platform overview, one per tenant, cost and showback.

Built with grafana-foundation-sdk, Grafana's own typed builders for its dashboard
schema. Queries shared with alerts read the recording rules (tenantry/monitoring/rules.py);
every other name is in the metric catalog (tenantry/monitoring/metrics.py). Figures
that are the Plan's (objectives, sustainable tokens, GPU shares, hardware classes)
are written into the query as constant series, so none is typed twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.builders.dashboard import CustomVariable, Dashboard, DatasourceVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableOption

from tenantry.configs.node_registration import POOL_LABEL
from tenantry.monitoring.metric_labels import node_label
from tenantry.monitoring.records import from_team
from tenantry.monitoring.rules import P95_ERROR_BUDGET
from tenantry.plan.model import EnginePlan, Plan

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
TENANT_VARIABLE = "tenant"
SELECTED_TENANT = '{tenant="$tenant"}'
SELECTED_TEAM = '{team_alias="$tenant"}'
"""LiteLLM labels the tenant as its team alias (the reconciler names each team after its tenant)."""
GATEWAY_JOB = "tenantry-gateway"
"""The gateway's scrape job: its Service's name on Kubernetes, the local stack's job name."""
GRAFANA_BUILTINS = {"__rate_interval": "5m", "__range_s": "3600", "__range": "1h"}
"""What Grafana substitutes for its own variables, at the values the checks use (longest name first)."""
_POOL = node_label(POOL_LABEL)
NODE_POOL = (f'label_replace(label_replace(max by (node, {_POOL}) '
             f'(kube_node_labels{{{_POOL}!=""}}), "Hostname", "$1", "node", "(.*)"), '
             f'"pool", "$1", "{_POOL}", "(.*)")')
"""Each GPU node's pool, keyed by the Hostname label the DCGM exporter gives its series."""


def dashboards(plan: Plan) -> dict[str, dict[str, Any]]:
    """Grafana dashboard JSON models by file name, for the sidecar's ConfigMaps."""
    built = {
        "tenantry-platform.json": _platform(plan),
        "tenantry-tenant.json": _tenant(plan),
        "tenantry-cost.json": _cost(plan),
    }
    return {name: json.loads(JSONEncoder(sort_keys=True).encode(board.build())) for name, board in built.items()}


def panels(model: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard model, rows' collapsed panels included (rows themselves excluded)."""
    for panel in model.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def expand(expr: str, **variables: str) -> str:
    """A panel's PromQL as Grafana sends it: Grafana's own variables and the dashboard's substituted."""
    values = {**GRAFANA_BUILTINS, **variables}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def hardware_class(engine: EnginePlan) -> str:
    """What an engine's tokens run on: the pool's GPU type, and the MIG slice when it has one."""
    return f"{engine.gpu} {engine.mig_profile}" if engine.mig_profile else engine.gpu


def gpu_equivalents(plan: Plan, engine: EnginePlan) -> float:
    """Whole GPUs an engine's replicas take from its pool (a MIG slice counts as its share of a GPU)."""
    price = next(p.gpu_hour_price_usd for p in plan.pools if p.name == engine.pool)
    return engine.tokens.usd_per_hour / price


def _quoted(value: str) -> str:
    return json.dumps(value)


def _plan_series(label: str, values: Mapping[str, float]) -> str:
    """A constant series per key, labelled label=key: the Plan's figures joined like any metric."""
    series = " or ".join(f'label_replace(vector({value:g}), {_quoted(label)}, {_quoted(key)}, "", "")'
                         for key, value in sorted(values.items()))
    return f"({series})"


def _relabel(expr: str, target: str, source: str, groups: Mapping[str, tuple[str, ...]]) -> str:
    """expr with label target set to the key of the group its label source falls in."""
    for key, members in sorted(groups.items()):
        pattern = "|".join(re.escape(member) for member in sorted(set(members)))
        expr = f"label_replace({expr}, {_quoted(target)}, {_quoted(key)}, {_quoted(source)}, {_quoted(pattern)})"
    return expr


def _engine_of_model_id(plan: Plan, expr: str) -> str:
    """LiteLLM's model_id is the served name (an engine or one of its adapters): label each series with its engine."""
    return _relabel(expr, "engine", "model_id", {e.name: (e.name, *(a.name for a in e.lora.adapters))
                                                  for e in plan.engines})


def _hardware_of(plan: Plan, expr: str, source: str) -> str:
    classes: dict[str, tuple[str, ...]] = {}
    for engine in plan.engines:
        classes[hardware_class(engine)] = (*classes.get(hardware_class(engine), ()), engine.name)
    return _relabel(expr, "hardware", source, classes)


def _served_tokens_per_second() -> str:
    return ("sum by (model_name) (rate(vllm:prompt_tokens_total[$__rate_interval])) + "
            "sum by (model_name) (rate(vllm:generation_tokens_total[$__rate_interval]))")


def _sustainable_tokens_per_second(plan: Plan) -> str:
    return _plan_series("model_name", {e.name: e.tokens.sustainable_tpm / 60 for e in plan.engines})


def _query(expr: str, legend: str = "__auto", *, instant: bool = False) -> Dataquery:
    query = Dataquery().expr(expr).legend_format(legend).datasource(DATASOURCE)
    return query.instant() if instant else query.range()


_KINDS = {"timeseries": (timeseries.Panel, 8, 8), "stat": (stat.Panel, 6, 6), "table": (table.Panel, 12, 8)}
"""Each kind of panel: its builder, default width (of 24) and height."""


class _Board:
    """A dashboard being built: panels numbered in the order they are added (ids unique within it)."""

    def __init__(self, uid: str, title: str, description: str) -> None:
        datasource = DatasourceVariable("datasource").label("Data source").type("prometheus")
        self.dashboard = (Dashboard(title).uid(uid).description(description).tags(["tenantry"])
                          .time("now-6h", "now").refresh("1m").with_variable(datasource))
        self.next_id = 0

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def row(self, title: str) -> None:
        self.dashboard = self.dashboard.with_row(Row(title).id(self._id()))

    def panel(self, kind: str, title: str, description: str, unit: str, *queries: Dataquery,
              span: int | None = None) -> None:
        builder, width, height = _KINDS[kind]
        panel = builder().id(self._id()).title(title).description(description).unit(unit).datasource(DATASOURCE)
        for ref, query in zip("ABCDEFGH", queries, strict=False):
            panel = panel.with_target(query.ref_id(ref))
        self.dashboard = self.dashboard.with_panel(panel.span(span or width).height(height))


def _platform(plan: Plan) -> Dashboard:
    engines = "|".join(re.escape(e.name) for e in plan.engines)
    b = _Board("tenantry-platform", "tenantry / Platform overview", f"Engines, gateway and GPUs of stack {plan.stack}.")
    b.row("Engines")
    b.panel("timeseries", "Engines up", "Prometheus' scrape of each engine (1 = up).", "short",
            _query(f"up{{job=~{_quoted(engines)}}}", "{{job}} {{instance}}"))
    b.panel("timeseries", "Requests running", "Sequences each engine is generating for.", "short",
            _query("sum by (model_name) (vllm:num_requests_running)", "{{model_name}}"))
    b.panel("timeseries", "Requests waiting", "Requests queued in each engine's scheduler.", "short",
            _query("sum by (model_name) (vllm:num_requests_waiting)", "{{model_name}}"))
    b.panel("timeseries", "KV-cache usage", "Share of the KV cache in use (the fullest replica).", "percentunit",
            _query("max by (model_name) (vllm:kv_cache_usage_perc)", "{{model_name}}"))
    b.panel("timeseries", "Preemptions", "Sequences preempted for lack of KV-cache blocks, per second.", "short",
            _query("sum by (model_name) (rate(vllm:num_preemptions_total[$__rate_interval]))", "{{model_name}}"))
    b.panel("timeseries", "Tokens per second", "Prompt tokens prefilled and tokens generated.", "short",
            _query("sum by (model_name) (rate(vllm:prompt_tokens_total[$__rate_interval]))", "{{model_name}} prompt"),
            _query("sum by (model_name) (rate(vllm:generation_tokens_total[$__rate_interval]))",
                   "{{model_name}} generated"))
    b.panel("timeseries", "Time to first token p95 (engine)",
            "vLLM's own histogram: the queue and the prefill, no gateway.", "s",
            _query("histogram_quantile(0.95, sum by (model_name, le) "
                   "(rate(vllm:time_to_first_token_seconds_bucket[$__rate_interval])))", "{{model_name}}"))
    b.panel("table", "LoRA adapters in use",
            "Adapters each engine last ran or queued, and its max_loras (vLLM keeps a series per set it has seen, "
            "valued at when it saw it: the newest is the current one).", "dateTimeAsIso",
            _query("topk by (job) (1, vllm:lora_requests_info)", "{{job}}", instant=True), span=16)
    b.row("Gateway")
    b.panel("timeseries", "Gateway replicas up", "LiteLLM replicas Prometheus scrapes.", "short",
            _query(f'sum(up{{job="{GATEWAY_JOB}"}})', "replicas up"))
    b.panel("timeseries", "Requests by status", "Requests LiteLLM answered, by HTTP status.", "reqps",
            _query("sum by (status_code) (rate(litellm_proxy_total_requests_metric_total[$__rate_interval]))",
                   "{{status_code}}"))
    b.panel("timeseries", "Admissions and sheds by reason", "tenantry's admission decisions (a shed is a 429).",
            "reqps",
            _query("sum by (decision, reason) (tenantry:gateway_admissions:rate5m)", "{{decision}} {{reason}}"))
    b.panel("timeseries", "Tenant-policy plugin latency", "Time the plugin's pre-call hook adds to a request.", "s",
            *(_query(f"histogram_quantile({q}, sum by (le) (rate(tenantry_gateway_policy_seconds_bucket"
                     "[$__rate_interval])))", f"p{q * 100:g}") for q in (0.5, 0.99)))
    b.row("GPUs")
    by_pool = f"* on (Hostname) group_left (pool) {NODE_POOL}"
    b.panel("timeseries", "GPU utilisation per pool", "DCGM's GPU utilisation, whole GPUs, averaged per pool.",
            "percent", _query(f'avg by (pool) (DCGM_FI_DEV_GPU_UTIL{{GPU_I_PROFILE=""}} {by_pool})', "{{pool}}"))
    b.panel("timeseries", "MIG slice activity per pool and profile",
            "Graphics-engine activity of MIG instances (DCGM profiling).", "percentunit",
            _query(f'avg by (pool, GPU_I_PROFILE) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{{GPU_I_PROFILE!=""}} {by_pool})',
                   "{{pool}} {{GPU_I_PROFILE}}"))
    b.panel("timeseries", "GPU memory used per pool and MIG slice",
            "Frame buffer used over frame buffer, per pool and MIG profile.", "percentunit",
            _query(f"sum by (pool, GPU_I_PROFILE) (DCGM_FI_DEV_FB_USED {by_pool}) / "
                   f"sum by (pool, GPU_I_PROFILE) ((DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) {by_pool})",
                   "{{pool}} {{GPU_I_PROFILE}}"))
    b.panel("timeseries", "GPU power per pool", "Power drawn by each pool's GPUs.", "watt",
            _query(f"sum by (pool) (DCGM_FI_DEV_POWER_USAGE {by_pool})", "{{pool}}"))
    return b.dashboard


def _tenant(plan: Plan) -> Dashboard:
    names = [t.name for t in plan.tenants]
    # The Plan's tenants, not a label's values: a tenant with no traffic yet is still listed.
    variable = (CustomVariable(TENANT_VARIABLE).label("Tenant").values(",".join(names))
                .options([VariableOption(text=n, value=n, selected=i == 0) for i, n in enumerate(names)])
                .current(VariableOption(text=names[0], value=names[0])))
    b = _Board("tenantry-tenant", "tenantry / Tenant",
               f"One tenant of stack {plan.stack}: its SLOs, errors, tokens, refusals, spend and cache reuse.")
    b.dashboard = b.dashboard.with_variable(variable)
    _tenant_service_level(b)
    _tenant_traffic(b)
    _tenant_budget(b)
    return b.dashboard


def _tenant_service_level(b: _Board) -> None:
    b.row("Service level")
    for name, title in (("ttft", "Time to first token"), ("itl", "Inter-token latency")):
        b.panel("timeseries", f"{title} p95 vs objective", "The tenant's p95 per engine against its contracted p95.",
                "s", _query(f"tenantry:tenant_{name}_seconds:p95_5m{SELECTED_TENANT}", "p95 {{engine}}"),
                _query(f"tenantry:tenant_objective:{name}_seconds{SELECTED_TENANT}", "objective"))
    b.panel("stat", "Error budget left (3 days)",
            f"1 - share of requests over an objective / the {P95_ERROR_BUDGET:.0%} a p95 objective allows; "
            "the worst engine.", "percentunit",
            _query(f"1 - max by (objective) (tenantry:tenant_slo_miss_ratio:rate3d{SELECTED_TENANT}) / "
                   f"{P95_ERROR_BUDGET:g}", "{{objective}}", instant=True))
    b.panel("timeseries", "Requests over their SLO",
            "Share of requests over the TTFT, ITL or either objective, per engine.", "percentunit",
            _query(f"tenantry:tenant_slo_miss_ratio:rate5m{SELECTED_TENANT}", "{{engine}} {{objective}}"))
    # The record has no series while no error was counted; 0 then, as long as the tenant has traffic.
    no_errors = f"0 * sum by (tenant) (tenantry:tenant_tokens:rate5m{SELECTED_TENANT})"
    b.panel("timeseries", "Error ratio vs maximum",
            "Server errors and timeouts over requests (the tenant's own 429s are not errors).", "percentunit",
            _query(f"tenantry:tenant_error_ratio:rate10m{SELECTED_TENANT} or {no_errors}", "errors"),
            _query(f"tenantry:tenant_objective:max_error_rate{SELECTED_TENANT}", "maximum"))
    b.panel("timeseries", "Goodput", "Requests per second within both objectives, against all requests served.",
            "reqps",
            _query(f"sum by (engine) (tenantry:tenant_goodput:rate5m{SELECTED_TENANT})", "within SLO {{engine}}"),
            _query(f"sum by (engine) (rate(tenantry_tenant_requests_total{SELECTED_TENANT}[$__rate_interval]))",
                   "served {{engine}}"))


def _tenant_traffic(b: _Board) -> None:
    b.row("Traffic")
    b.panel("timeseries", "Tokens per second", "Prompt (input) and generated (output) tokens.", "short",
            _query(f"tenantry:tenant_tokens:rate5m{SELECTED_TENANT}", "{{direction}}"))
    b.panel("timeseries", "Requests by status",
            "Requests LiteLLM answered for the tenant, by HTTP status (429s included).", "reqps",
            _query("sum by (status_code) (rate(litellm_proxy_total_requests_metric_total"
                   f"{SELECTED_TEAM}[$__rate_interval]))", "{{status_code}}"))
    limited = ('rate(litellm_proxy_failed_requests_metric_total{team_alias="$tenant", exception_status="429"}'
               "[$__rate_interval])")
    b.panel("timeseries", "Admissions, 429s and refusals by reason",
            "tenantry's decisions (admitted, or shed with a 429 by reason), its refusals for a tier's caps, and "
            "LiteLLM's 429s for the tenant's own limits (RPM, TPM, budget) by exception.", "reqps",
            _query(f"sum by (decision, reason) (tenantry:gateway_admissions:rate5m{SELECTED_TENANT}) or "
                   f'label_replace(sum by (reason) (tenantry:gateway_refusals:rate5m{SELECTED_TENANT}), '
                   '"decision", "refused", "", "") or '
                   f'label_replace(label_replace(sum by (exception_class) ({limited}), "decision", "limited", "", ""), '
                   '"reason", "$1", "exception_class", "(.*)")', "{{decision}} {{reason}}"))
    b.panel("timeseries", "Prefix-cache reuse", "Cached prompt tokens over prompt tokens, per engine (1 h).",
            "percentunit",
            _query(f"tenantry:tenant_prefix_cache_reuse:ratio_rate1h{SELECTED_TENANT}", "{{engine}}"))


def _tenant_budget(b: _Board) -> None:
    b.row("Budget")
    budget = f"max by (tenant) (tenantry:tenant_objective:budget_usd{SELECTED_TENANT})"
    spent = f"tenantry:tenant_budget_spent:ratio{SELECTED_TENANT} * on (tenant) {budget}"
    # Each gateway replica reports the hours its last look at the team saw left: the freshest is the smallest.
    hours_left = f"min by (tenant) ({from_team(f'litellm_team_budget_remaining_hours_metric{SELECTED_TEAM}')})"
    b.panel("stat", "Budget spent", "Share of the window's budget spent.", "percentunit",
            _query(f"tenantry:tenant_budget_spent:ratio{SELECTED_TENANT}", "spent", instant=True))
    b.panel("timeseries", "Spend and projection vs budget",
            "Spent in the window, spent plus the last hour's rate until the window resets, and the budget.",
            "currencyUSD", _query(spent, "spent"),
            _query(f"{spent} + on (tenant) tenantry:tenant_spend_usd:rate1h{SELECTED_TENANT} * 3600 "
                   f"* on (tenant) {hours_left}", "projected at the window's end"),
            _query(budget, "budget"), span=18)


def _cost(plan: Plan) -> Dashboard:
    spend = _engine_of_model_id(plan, "increase(litellm_spend_metric_total[$__range])")
    b = _Board("tenantry-cost", "tenantry / Cost and showback",
               f"What each tenant of stack {plan.stack} costs, on which engine and hardware; prices, GPU shares and "
               "sustainable throughput are the Plan's.")
    b.row("Spend")
    b.panel("timeseries", "Spend rate per tenant",
            "USD per hour, averaged over the last hour (LiteLLM's spend at the Plan's prices).", "currencyUSD",
            _query("sum by (tenant) (tenantry:tenant_spend_usd:rate1h) * 3600", "{{tenant}}"), span=12)
    b.panel("table", "Top consumers", "The ten tenants that spent most in the dashboard's time range.", "currencyUSD",
            _query("topk(10, sum by (team_alias) (increase(litellm_spend_metric_total[$__range])))", "{{team_alias}}",
                   instant=True))
    b.panel("table", "Spend per tenant, engine and hardware class", "USD in the dashboard's time range.",
            "currencyUSD", _query(f"sum by (team_alias, engine, hardware) ({_hardware_of(plan, spend, 'engine')})",
                                  "{{team_alias}} {{engine}}", instant=True), span=24)
    b.row("GPUs")
    shares = f"sum by (team_alias, engine) ({spend}) / on (engine) group_left sum by (engine) ({spend})"
    gpus = _plan_series("engine", {e.name: gpu_equivalents(plan, e) for e in plan.engines})
    b.panel("table", "GPU-hours attributed",
            "Each engine's GPU-hours in the time range, shared by its tenants' spend (a MIG slice counts as its "
            "share of a GPU).", "h",
            _query(f"{shares} * on (engine) group_left () {gpus} * $__range_s / 3600", "{{team_alias}} {{engine}}",
                   instant=True))
    sustainable = _sustainable_tokens_per_second(plan)
    b.panel("timeseries", "Effective utilisation per engine",
            "Tokens served over the tokens the engine could sustain (the Plan's sustainable throughput at its "
            "tenants' mix).", "percentunit",
            _query(f"({_served_tokens_per_second()}) / on (model_name) {sustainable}", "{{model_name}}"))
    served_by_class = _hardware_of(plan, f"({_served_tokens_per_second()})", "model_name")
    sustainable_by_class = _hardware_of(plan, sustainable, "model_name")
    b.panel("timeseries", "Effective utilisation per hardware class",
            "Tokens served over sustainable tokens, per GPU type and MIG profile.", "percentunit",
            _query(f"sum by (hardware) ({served_by_class}) / sum by (hardware) ({sustainable_by_class})",
                   "{{hardware}}"), span=12)
    return b.dashboard
