"""One HTML file per gate run: the verdict, per-tenant latency percentiles
over time, time-to-first-token distributions and 429s over time, with the
CSVs beside it. A side-by-side run (tenantry's policy on, then plain
LiteLLM to vLLM) shows both, and their ratio, in one file.

Plots are plotly figures; plotly.js is inlined once, so the file opens offline.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tenantry.gate.records import REQUESTS_CSV, Record
from tenantry.gate.verdict import TenantFigures, ms, percentile

WINDOW_SECONDS = 10.0
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass
class RunView:
    """One run as the report shows it."""

    label: str
    directory: Path
    records: list[Record]
    verdict: dict
    """verdict.json as written by the quitting listener."""


def _windows(records: list[Record], seconds: float) -> list[float]:
    end = max([seconds, *(r.sent for r in records)])
    return [i * WINDOW_SECONDS for i in range(int(end // WINDOW_SECONDS) + 1)]


def _stage_lines(figure: go.Figure, view: RunView, rows: int) -> None:
    for action in view.verdict.get("actions", []):
        if action["at"] < 0.5 and action["action"].startswith("stage"):
            continue
        for row in range(1, rows + 1):
            figure.add_vline(x=action["at"], line_dash="dot", line_color="#888", row=row, col=1)
        figure.add_annotation(x=action["at"], y=1.02, yref="paper", text=html.escape(action["action"]),
                              showarrow=False, font={"size": 10})


def latency_over_time(view: RunView) -> go.Figure:
    """Per tenant, the p50 and p95 of time to first token and of end-to-end latency in each window."""
    tenants = sorted({r.tenant for r in view.records})
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                           subplot_titles=("time to first token (ms)", "end-to-end latency (ms)"))
    starts = _windows(view.records, view.verdict.get("seconds", 0))
    for i, tenant in enumerate(tenants):
        colour = COLOURS[i % len(COLOURS)]
        ok = [r for r in view.records if r.tenant == tenant and r.ok]
        for row, metric in ((1, "ttft"), (2, "e2e")):
            for q, dash in ((0.5, "dot"), (0.95, "solid")):
                xs, ys = [], []
                for start in starts:
                    values = [getattr(r, metric) for r in ok if start <= r.sent < start + WINDOW_SECONDS
                              and getattr(r, metric) is not None]
                    if values:
                        xs.append(start + WINDOW_SECONDS / 2)
                        ys.append(percentile(values, q) * 1000)
                figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{tenant} p{int(q * 100)}",
                                            legendgroup=tenant, showlegend=row == 1,
                                            line={"color": colour, "dash": dash}), row=row, col=1)
    figure.update_xaxes(title_text="seconds into the run", row=2, col=1)
    figure.update_yaxes(type="log", row=1, col=1)
    figure.update_yaxes(type="log", row=2, col=1)
    figure.update_layout(height=620, title=f"{view.label}: latency percentiles per {WINDOW_SECONDS:g} s window")
    _stage_lines(figure, view, 2)
    return figure


def ttft_distribution(view: RunView) -> go.Figure:
    """Cumulative distribution of each tenant's time to first token."""
    figure = go.Figure()
    for i, tenant in enumerate(sorted({r.tenant for r in view.records})):
        values = sorted(r.ttft * 1000 for r in view.records if r.tenant == tenant and r.ok and r.ttft is not None)
        if values:
            figure.add_trace(go.Scatter(x=values, y=[(k + 1) / len(values) for k in range(len(values))],
                                        mode="lines", name=tenant, line={"color": COLOURS[i % len(COLOURS)]}))
        slo = view.verdict["tenants"].get(tenant, {}).get("slo_ttft_p95")
        if slo:
            figure.add_vline(x=slo * 1000, line_dash="dash", line_color=COLOURS[i % len(COLOURS)],
                             annotation_text=f"{tenant} SLO", annotation_font_size=10)
    figure.update_layout(height=420, title=f"{view.label}: time to first token, cumulative",
                         xaxis={"title": "ms", "type": "log"}, yaxis={"title": "share of requests"})
    return figure


def refusals_over_time(view: RunView) -> go.Figure:
    """429s per window and tenant."""
    figure = go.Figure()
    starts = _windows(view.records, view.verdict.get("seconds", 0))
    for i, tenant in enumerate(sorted({r.tenant for r in view.records})):
        counts = [sum(r.tenant == tenant and r.status == 429 and start <= r.sent < start + WINDOW_SECONDS
                      for r in view.records) for start in starts]
        figure.add_trace(go.Bar(x=[s + WINDOW_SECONDS / 2 for s in starts], y=counts, name=tenant,
                                marker_color=COLOURS[i % len(COLOURS)]))
    figure.update_layout(height=360, barmode="stack", title=f"{view.label}: 429s per {WINDOW_SECONDS:g} s",
                         xaxis={"title": "seconds into the run"}, yaxis={"title": "429 responses"})
    _stage_lines(figure, view, 1)
    return figure


def _tenant_table(tenants: dict[str, dict]) -> str:
    rows = []
    for figures in tenants.values():
        f = TenantFigures(**figures)
        verdict = "not judged" if f.passed is None else ("PASS" if f.passed else "FAIL")
        rows.append(
            f"<tr class='{verdict.split()[0].lower()}'><td>{html.escape(f.tenant)}</td><td>{f.tier}</td>"
            f"<td>{f.requests}</td><td>{f.succeeded}</td><td>{f.quota_429}</td><td>{f.shed_429}</td>"
            f"<td>{f.error_rate:.1%} / {f.slo_max_error_rate:.1%}</td>"
            f"<td>{ms(f.ttft_p50)}</td><td>{ms(f.ttft_p95)} / {ms(f.slo_ttft_p95)}</td>"
            f"<td>{'—' if f.cached_share is None else f'{f.cached_share:.0%}'}</td>"
            f"<td>{ms(f.itl_p95)} / {ms(f.slo_itl_p95)}</td><td>{ms(f.e2e_p95)}</td>"
            f"<td>{f.output_tokens_per_s:.1f}</td><td>{f.goodput:.2f}</td><td>{verdict}</td>"
            f"<td>{html.escape('; '.join([*f.reasons, *(f'{n} (reported, not judged)' for n in f.notes)]))}</td></tr>")
    return ("<table><tr><th>tenant</th><th>tier</th><th>sent</th><th>ok</th><th>quota 429</th><th>shed 429</th>"
            "<th>errors / SLO</th><th>TTFT p50 ms</th><th>TTFT p95 ms / SLO</th><th>prompt cached</th>"
            "<th>ITL p95 ms / SLO</th>"
            "<th>E2E p95 ms</th><th>output tok/s</th><th>goodput req/s</th><th>verdict</th><th>why</th></tr>"
            + "".join(rows) + "</table>")


def tier_tokens(stage: dict[str, dict]) -> dict[str, float]:
    """Output tokens per second each tier was served in a stage (answered requests only)."""
    served: dict[str, float] = {}
    for f in stage.values():
        served[f["tier"]] = served.get(f["tier"], 0.0) + f["output_tokens_per_s"]
    return served


def load_cell(load: dict[str, float] | None) -> str:
    """An engine's stage in engine_load.busy_by_stage: busy share / mean running (share of samples answered)."""
    if load is None:
        return "—"
    return f"{load['busy']:.0%} / {load['running']:.1f} ({load.get('answered', 1.0):.0%})"


def _isolation_table(v: dict) -> str:
    """By stage, the tokens each tier was served beside each engine's busy share (tenantry/gate/engine_load.py)."""
    if not v.get("engines"):
        return ""
    engines = sorted({e for stage in v["engines"].values() for e in stage})
    rows = []
    for stage, tenants in v["stages"].items():
        served, load = tier_tokens(tenants), v["engines"].get(stage, {})
        rows.append(f"<tr><td>{html.escape(stage)}</td>"
                    + "".join(f"<td>{served.get(t, 0.0):.1f}</td>" for t in ("guaranteed", "best-effort", "spot"))
                    + "".join(f"<td>{load_cell(load.get(e))}</td>" for e in engines) + "</tr>")
    return ("<h4>price of isolation</h4><table><tr><th>stage</th><th>guaranteed tok/s</th><th>best-effort tok/s</th>"
            "<th>spot tok/s</th>" + "".join(f"<th>{html.escape(e)} busy / running (answered)</th>" for e in engines)
            + "</tr>" + "".join(rows) + "</table>")


def _run_section(view: RunView, include_js: bool, base: Path) -> str:
    v = view.verdict
    checks = "".join(f"<li class='{'pass' if c['passed'] else 'fail'}'>{c['name']}: "
                     f"{'PASS' if c['passed'] else 'FAIL'} — {html.escape(c['detail'])}</li>" for c in v["checks"])
    stages = "".join(f"<h4>stage {html.escape(name)}</h4>{_tenant_table(tenants)}"
                     for name, tenants in v["stages"].items()) if len(v["stages"]) > 1 else ""
    plots = []
    for k, figure in enumerate((latency_over_time(view), ttft_distribution(view), refusals_over_time(view))):
        plots.append(figure.to_html(full_html=False, include_plotlyjs="inline" if include_js and k == 0 else False,
                                    config={"displayModeBar": False}))
    links = [os.path.relpath(p, base) for p in sorted(view.directory.glob("*.csv"))]
    csvs = " · ".join(f"<a href='{html.escape(link)}'>{html.escape(link)}</a>" for link in links)
    return (f"<section><h2>{html.escape(view.label)}: {'PASS' if v['passed'] else 'FAIL'}</h2>"
            f"{_tenant_table(v['tenants'])}<ul>{checks}</ul>{stages}{_isolation_table(v)}"
            f"<div class='plots'>{''.join(plots)}</div><p>CSVs: {csvs or '—'}</p></section>")


def ttft_comparison(on: dict, off: dict) -> list[tuple[str, str, str, float | None, float | None]]:
    """(stage, tenant, tier, p95 TTFT with, without) for each judged tenant and stage of two
    verdicts of the same scenario: what the side-by-side, its table and the benchmark show."""
    rows = []
    for stage, tenants in on["stages"].items():
        for name, figures in tenants.items():
            other = off["stages"].get(stage, {}).get(name)
            if figures["judged"] and other is not None:
                rows.append((stage, name, figures["tier"], figures["ttft_p95"], other["ttft_p95"]))
    return rows


def _comparison(views: list[RunView]) -> str:
    """Each judged tenant's p95 time to first token per stage, policy on against off, and the ratio."""
    on, off = views
    rows = []
    for stage, name, tier, a, b in ttft_comparison(on.verdict, off.verdict):
        ratio = f"{a / b:.2f}x" if a and b else "—"
        rows.append(f"<tr><td>{html.escape(stage)}</td><td>{html.escape(name)}</td><td>{tier}</td>"
                    f"<td>{ms(a)}</td><td>{ms(b)}</td><td>{ratio}</td></tr>")
    return ("<section><h2>What tenantry's policy changes</h2><table><tr><th>stage</th><th>tenant</th><th>tier</th>"
            f"<th>TTFT p95 ms, {html.escape(on.label)}</th><th>TTFT p95 ms, {html.escape(off.label)}</th>"
            "<th>ratio</th></tr>" + "".join(rows) + "</table></section>")


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.25em .5em;font-size:.85em;text-align:right}th{background:#f3f3f3}
td:first-child{text-align:left}tr.fail td,li.fail{color:#b00}tr.pass td:nth-last-child(2),li.pass{color:#070}
section{margin-bottom:2.5em}"""


def write_report(path: Path, title: str, views: list[RunView], notes: list[str]) -> Path:
    body = [f"<h1>{html.escape(title)}</h1>", *(f"<p>{html.escape(n)}</p>" for n in notes)]
    if len(views) == 2:
        body.append(_comparison(views))
    body += [_run_section(view, i == 0, path.parent) for i, view in enumerate(views)]
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    f"<style>{STYLE}</style></head><body>{''.join(body)}"
                    f"<p>Every request is in each run's {REQUESTS_CSV}; Locust's own statistics in locust_*.csv.</p>"
                    "</body></html>", encoding="utf-8")
    return path
