"""`tenantry plan` as tables a platform engineer reads before deploying."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tenantry.findings import Finding
from tenantry.monitoring.signals import engine_signals
from tenantry.plan import Plan
from tenantry.plan.model import EnginePlan, TenantPlan
from tenantry.plan.tokens import OVERCOMMIT_WARNING
from tenantry.units import count, human_bytes


def _k(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}K"
    return f"{n:,.0f}"


def _ctx(tokens: int) -> str:
    return f"{tokens / 1024:.1f}K" if tokens >= 1024 else str(tokens)


def _placement(e: EnginePlan) -> str:
    if e.placement == "mig":
        return f"{e.pool} MIG {e.mig_profile}"
    if e.placement == "cpu":
        return f"{e.pool} CPU"
    if e.pipeline_parallel > 1:  # a replica over nodes: a stage per node, its layers as vLLM splits them
        return f"{e.pool} TP{e.tensor_parallel} x PP{e.pipeline_parallel} ({'+'.join(map(str, e.stage_layers))} layers)"
    return f"{e.pool} TP{e.tensor_parallel}"


def _price(usd: float) -> str:
    return f"{usd:.5f}" if usd < 0.01 else f"{usd:.3f}"


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    return table


ENGINE_LABEL_WIDTH, ENGINE_COLUMN_WIDTH = 32, 25
"""The engines table's label column and each engine's column, in characters (its widest figures)."""
TENANT_ROWS = 100
"""Tenants listed one per row by default: a platform selling API access to thousands reads a summary by tier
and its findings, not ten thousand rows (rendering them took 10 s at 10,000 tenants); `--all-tenants` lists
every one, and `--json` gives every figure."""


def print_plan(plan: Plan, console: Console, all_tenants: bool = False) -> None:
    console.print(
        f"[bold]tenantry plan[/bold] · stack [bold]{plan.stack}[/bold] · Kubernetes {plan.kubernetes_version}"
        f" · MIG strategy {plan.mig_strategy}"
    )
    if plan.description:
        console.print(Text(plan.description, style="dim"))
    console.print(_pools(plan))
    # An engine per column, as many columns as the terminal shows legibly, then the next table.
    per_table = max(1, (console.width - ENGINE_LABEL_WIDTH) // ENGINE_COLUMN_WIDTH)
    for first in range(0, len(plan.engines), per_table):
        group = plan.engines[first:first + per_table]
        title = "Engines (memory per GPU or MIG slice)" + (
            f", {first + 1}-{first + len(group)} of {len(plan.engines)}" if len(plan.engines) > per_table else "")
        engines = _table(title, "", *(e.name for e in group), right=tuple(e.name for e in group))
        for label, show in _ENGINE_ROWS:
            engines.add_row(label, *(show(e) for e in group))
            if label == SCALING_ROW:
                engines.add_row("scales up on", *(_scales_up_on(plan, e) for e in group))
        console.print(engines)
    listed = plan.tenants if all_tenants else plan.tenants[:TENANT_ROWS]
    if len(listed) < len(plan.tenants):
        console.print(_tiers(plan))
    console.print(_tenants(plan, listed))
    console.print(_tenant_slos(plan, listed))
    if len(listed) < len(plan.tenants):
        console.print(Text(f"The first {len(listed):,} of {len(plan.tenants):,} tenants: every one with "
                           f"--all-tenants, every figure with --json.", style="dim"))
    print_verdict(plan, console)


def _pools(plan: Plan) -> Table:
    pools = _table("Node pools", "pool", "GPU", "nodes × GPUs", "used", "per GPU", "$/GPU-h", right=("used", "$/GPU-h"))
    for p in plan.pools:
        if p.mig_layout:
            layout = ", ".join(p.mig_layout) + " (" + ", ".join(f"{s.profile} {s.used}/{s.available}" for s in p.mig_slices) + ")"
        else:
            layout = "one engine process each" if p.gpu == "CPU" else "whole GPUs"
        pools.add_row(p.name, p.gpu, f"{p.nodes} × {p.gpus_per_node}", f"{p.gpus_used}/{p.gpus}", layout,
                      f"{p.gpu_hour_price_usd:.2f}")
    return pools


def _overcommit(ratio: float) -> Text:
    return Text(f"{ratio:.2f}×", style="red" if ratio > OVERCOMMIT_WARNING else "green")


def _lora(e: EnginePlan) -> str:
    if not e.lora.enabled:
        return "—"
    return f"{e.lora.max_loras} / {e.lora.max_lora_rank} / {e.lora.max_cpu_loras} ({len(e.lora.adapters)} adapters)"


def _routing(e: EnginePlan) -> str:
    """Service, or the kv-aware path and each tier's objective priority on the pool (higher is more critical)."""
    if e.routing is None:
        return "service"
    tiers = " / ".join(f"{o.tier} {o.priority}" for o in e.routing.objectives)
    return f"kv-aware (picker priority {tiers})"


def _scales_up_on(plan: Plan, e: EnginePlan) -> str:
    """What KEDA adds a replica on: each signal above the threshold its alert fires at (monitoring/signals.py)."""
    if not e.autoscaling:
        return "—"
    shown = {"waiting": lambda t: f"waiting > {t:g}", "kv-cache": lambda t: f"KV use > {t:.0%}",
             "ttft": lambda t: f"TTFT p95 > {t:g} s"}
    return ", ".join(shown[s.name](s.threshold) for s in engine_signals(plan, e))


SCALING_ROW = "scale down after / poll"
"""The engines table's row after which `scales up on` is shown (it needs the whole Plan)."""

_ENGINE_ROWS: tuple[tuple[str, Callable[[EnginePlan], str | Text]], ...] = (
    ("model", lambda e: f"{e.model} {e.weights}"),
    ("placement × replicas", lambda e: f"{_placement(e)} × {e.replicas}"
     + (f" to {e.autoscaling.max_replicas}" if e.autoscaling else "")),
    (SCALING_ROW, lambda e: (f"{e.autoscaling.scale_down_after_seconds} s / "
                                           f"{e.autoscaling.polling_seconds} s" if e.autoscaling else "—")),
    ("routing", _routing),
    ("device memory", lambda e: human_bytes(e.memory.device_bytes)),
    ("weights", lambda e: human_bytes(e.memory.weight_bytes)),
    ("runtime reserve", lambda e: human_bytes(e.memory.reserve_bytes)),
    ("LoRA slots", lambda e: human_bytes(e.memory.lora_bytes)),
    ("KV cache", lambda e: human_bytes(e.memory.kv_bytes)),
    ("KV bytes per token", lambda e: f"{e.kv.bytes_per_token:,}"),
    ("KV tokens per replica", lambda e: f"{e.kv.tokens_per_replica:,}"),
    ("sequences @ max context", lambda e: f"{e.kv.sequences_at_max_context:,} @ {_ctx(e.kv.max_context)}"),
    ("sequences @ typical", lambda e: f"{e.kv.sequences_at_typical_context:,} @ {_ctx(e.kv.typical_context)}"),
    ("max_num_seqs", lambda e: str(e.kv.max_num_seqs)),
    ("slots reserved / shared", lambda e: f"{e.slots.reserved_total} / {e.slots.shared} of {e.slots.capacity}"),
    ("best-effort / spot demand", lambda e: f"{e.slots.best_effort_demand} / {e.slots.spot_demand}"),
    ("LoRA max_loras / rank / cpu", _lora),
    ("prefill / decode tok/s", lambda e: (
        f"{e.tokens.prefill_tokens_per_second:,.0f} / {e.tokens.decode_tokens_per_second:,.0f}"
        + (" (measured)" if e.tokens.throughput_source == "spec" else ""))),
    ("TPM demand / sustainable", lambda e: f"{_k(e.tokens.demand_tpm)} / {_k(e.tokens.sustainable_tpm)}"),
    ("overcommit", lambda e: _overcommit(e.tokens.overcommit_ratio)),
    ("$ per 1K in / out", lambda e: (
        f"{_price(e.tokens.usd_per_1k_input_tokens)} / {_price(e.tokens.usd_per_1k_output_tokens)}")),
    ("GPU cost per hour", lambda e: f"${e.tokens.usd_per_hour:,.2f}"),
)
"""The engines table's rows, top to bottom: a label and what each engine shows there."""


def _tiers(plan: Plan) -> Table:
    """The tenants summed by tier: what a stack too large to list tenant by tenant sells."""
    tiers = _table("Tenants by tier", "tier (priority)", "tenants", "TPM", "RPM", "concurrency", "reserved",
                   right=("tenants", "TPM", "RPM", "concurrency", "reserved"))
    for tier, priority in plan.gateway.tier_priorities:
        of_tier = [t for t in plan.tenants if t.tier == tier]
        if of_tier:
            tiers.add_row(f"{tier} ({priority})", f"{len(of_tier):,}", _k(sum(t.tpm for t in of_tier)),
                          f"{sum(t.rpm for t in of_tier):,}", f"{sum(t.max_concurrency for t in of_tier):,}",
                          f"{sum(t.reserved_slots for t in of_tier):,}")
    return tiers


def _tenants(plan: Plan, listed: tuple[TenantPlan, ...]) -> Table:
    tenants = _table("Tenants", "tenant", "tier (priority)", "TPM", "RPM", "concurrency", "reserved", "budget",
                     "cache salt", "isolation", right=("TPM", "RPM", "concurrency", "reserved"))
    dedicated = [e for e in plan.engines if e.dedicated_to]
    for t in listed:
        tenants.add_row(t.name, f"{t.tier} ({t.priority})", _k(t.tpm), f"{t.rpm:,}", str(t.max_concurrency),
                        str(t.reserved_slots), f"${t.budget_usd:,.0f} / {t.budget_window}"
                        + (" showback" if t.budget_mode == "showback" else ""), t.cache_salt or "none",
                        _isolation(t.name, t.isolation, dedicated))
    return tenants


def _isolation(tenant: str, level: str, dedicated: list[EnginePlan]) -> str:
    """The level, and what the Plan dedicates to it: engines, and for dedicated-node their pools."""
    mine = [e for e in dedicated if e.dedicated_to == tenant]
    if not mine:
        return level
    pools = sorted({e.pool for e in mine if e.dedicated_nodes})
    return (f"{level}: {', '.join(e.name for e in mine)}"
            + (f" on pool {', '.join(pools)}" if pools else ""))


def _tenant_slos(plan: Plan, listed: tuple[TenantPlan, ...]) -> Table:
    slos = _table("Tenant SLOs and traffic", "tenant", "TTFT p95", "ITL p95", "errors", "typical in / out", "traffic",
                  right=("TTFT p95", "ITL p95", "errors"))
    for t in listed:
        traffic = ", ".join(f"{r.target} {r.share:.0%}" for r in t.traffic[:3])
        if len(t.traffic) > 3:
            traffic += f" (+{len(t.traffic) - 3} more)"
        if t.overload_fallback:
            traffic += f"; overloaded: {', '.join(t.overload_fallback)}"
        slos.add_row(t.name, f"{t.ttft_p95_ms:,.0f} ms", f"{t.itl_p95_ms:,.0f} ms", f"{t.max_error_rate:.1%}",
                     f"{t.typical_prompt_tokens:,} / {t.typical_output_tokens:,}", traffic)
    return slos


def _findings(findings: tuple[Finding, ...], style: str, mark: str, console: Console) -> None:
    for finding in findings:
        console.print(Text(f"  {mark} ", style=style) + Text(str(finding)), soft_wrap=True)


def print_verdict(plan: Plan, console: Console) -> None:
    summary = f"{count(len(plan.engines), 'engine')}, {count(len(plan.tenants), 'tenant')}"
    if plan.fits:
        console.print(Text("FITS", style="bold green") + Text(f": {summary}; {count(len(plan.warnings), 'warning')}"))
    else:
        console.print(
            Text("DOES NOT FIT", style="bold red")
            + Text(f": {summary}; {count(len(plan.refusals), 'reason')}, each with the field to change:")
        )
        _findings(plan.refusals, "red", "✗", console)
    if plan.warnings:
        console.print("Warnings:")
        _findings(plan.warnings, "yellow", "!", console)
