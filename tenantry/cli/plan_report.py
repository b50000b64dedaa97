"""`tenantry plan` as tables a platform engineer reads before deploying."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tenantry.findings import Finding
from tenantry.plan import Plan
from tenantry.plan.model import EnginePlan
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
    return f"{e.pool} TP{e.tensor_parallel}"


def _price(usd: float) -> str:
    return f"{usd:.5f}" if usd < 0.01 else f"{usd:.3f}"


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    return table


def print_plan(plan: Plan, console: Console) -> None:
    console.print(
        f"[bold]tenantry plan[/bold] · stack [bold]{plan.stack}[/bold] · Kubernetes {plan.kubernetes_version}"
        f" · MIG strategy {plan.mig_strategy}"
    )
    if plan.description:
        console.print(Text(plan.description, style="dim"))

    pools = _table("Node pools", "pool", "GPU", "nodes × GPUs", "used", "per GPU", "$/GPU-h", right=("used", "$/GPU-h"))
    for p in plan.pools:
        if p.mig_layout:
            layout = ", ".join(p.mig_layout) + " (" + ", ".join(f"{s.profile} {s.used}/{s.available}" for s in p.mig_slices) + ")"
        else:
            layout = "one engine process each" if p.gpu == "CPU" else "whole GPUs"
        pools.add_row(p.name, p.gpu, f"{p.nodes} × {p.gpus_per_node}", f"{p.gpus_used}/{p.gpus}", layout,
                      f"{p.gpu_hour_price_usd:.2f}")
    console.print(pools)

    engines = _table("Engines (memory per GPU or MIG slice)", "", *(e.name for e in plan.engines),
                     right=tuple(e.name for e in plan.engines))
    rows: list[tuple[str, list[str | Text]]] = [
        ("model", [f"{e.model} {e.weights}" for e in plan.engines]),
        ("placement × replicas", [f"{_placement(e)} × {e.replicas}" for e in plan.engines]),
        ("device memory", [human_bytes(e.memory.device_bytes) for e in plan.engines]),
        ("weights", [human_bytes(e.memory.weight_bytes) for e in plan.engines]),
        ("runtime reserve", [human_bytes(e.memory.reserve_bytes) for e in plan.engines]),
        ("LoRA slots", [human_bytes(e.memory.lora_bytes) for e in plan.engines]),
        ("KV cache", [human_bytes(e.memory.kv_bytes) for e in plan.engines]),
        ("KV bytes per token", [f"{e.kv.bytes_per_token:,}" for e in plan.engines]),
        ("KV tokens per replica", [f"{e.kv.tokens_per_replica:,}" for e in plan.engines]),
        ("sequences @ max context", [f"{e.kv.sequences_at_max_context:,} @ {_ctx(e.kv.max_context)}" for e in plan.engines]),
        ("sequences @ typical", [f"{e.kv.sequences_at_typical_context:,} @ {_ctx(e.kv.typical_context)}" for e in plan.engines]),
        ("max_num_seqs", [str(e.kv.max_num_seqs) for e in plan.engines]),
        ("slots reserved / shared", [f"{e.slots.reserved_total} / {e.slots.shared} of {e.slots.capacity}" for e in plan.engines]),
        ("best-effort / spot demand", [f"{e.slots.best_effort_demand} / {e.slots.spot_demand}" for e in plan.engines]),
        ("LoRA max_loras / rank / cpu", [
            f"{e.lora.max_loras} / {e.lora.max_lora_rank} / {e.lora.max_cpu_loras} ({len(e.lora.adapters)} adapters)"
            if e.lora.enabled else "—" for e in plan.engines
        ]),
        ("prefill / decode tok/s", [
            f"{e.tokens.prefill_tokens_per_second:,.0f} / {e.tokens.decode_tokens_per_second:,.0f}"
            + (" (measured)" if e.tokens.throughput_source == "spec" else "") for e in plan.engines
        ]),
        ("TPM demand / sustainable", [f"{_k(e.tokens.demand_tpm)} / {_k(e.tokens.sustainable_tpm)}" for e in plan.engines]),
        ("overcommit", [
            Text(f"{e.tokens.overcommit_ratio:.2f}×", style="red" if e.tokens.overcommit_ratio > 1.2 else "green")
            for e in plan.engines
        ]),
        ("$ per 1K in / out", [
            f"{_price(e.tokens.usd_per_1k_input_tokens)} / {_price(e.tokens.usd_per_1k_output_tokens)}" for e in plan.engines
        ]),
        ("GPU cost per hour", [f"${e.tokens.usd_per_hour:,.2f}" for e in plan.engines]),
    ]
    for label, values in rows:
        engines.add_row(label, *values)
    console.print(engines)

    tenants = _table("Tenants", "tenant", "tier (priority)", "TPM", "RPM", "concurrency", "reserved", "budget",
                     "cache salt", right=("TPM", "RPM", "concurrency", "reserved"))
    for t in plan.tenants:
        tenants.add_row(t.name, f"{t.tier} ({t.priority})", _k(t.tpm), f"{t.rpm:,}", str(t.max_concurrency),
                        str(t.reserved_slots), f"${t.budget_usd:,.0f} / {t.budget_window}", t.cache_salt or "none")
    console.print(tenants)

    slos = _table("Tenant SLOs and traffic", "tenant", "TTFT p95", "ITL p95", "errors", "typical in / out", "traffic",
                  right=("TTFT p95", "ITL p95", "errors"))
    for t in plan.tenants:
        traffic = ", ".join(f"{r.target} {r.share:.0%}" for r in t.traffic[:3])
        if len(t.traffic) > 3:
            traffic += f" (+{len(t.traffic) - 3} more)"
        slos.add_row(t.name, f"{t.ttft_p95_ms:,.0f} ms", f"{t.itl_p95_ms:,.0f} ms", f"{t.max_error_rate:.1%}",
                     f"{t.typical_prompt_tokens:,} / {t.typical_output_tokens:,}", traffic)
    console.print(slos)
    print_verdict(plan, console)


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
