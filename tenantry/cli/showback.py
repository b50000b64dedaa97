"""`tenantry showback STACK`: what each tenant used of each engine and what it cost, checked against the Plan.

Reads LiteLLM's spend records in PostgreSQL (the local stack's, or a cluster's
with --database-url) and shows, per tenant and engine: requests, tokens in and
out, spend in USD as LiteLLM recorded it, the share of the GPU bill and the
budget used. Each row's spend is recomputed from its tokens at the Plan's
per-token prices; a row that disagrees beyond rounding is flagged.

Share of the GPU bill: each engine's GPU cost over the period (the replicas
it ran, times the hours of --since, at the Plan's price of a replica: its
floor of replicas throughout, or for an autoscaled engine what Prometheus saw
it run, with --prometheus) split among the tenants it served by the GPU time their tokens
took, which is their tokens at the Plan's prices (a token's price is the GPU
cost of serving it at full throughput); idle time is split the same way.
Utilisation is the tokens served at the Plan's prices over the bill.
Budget used: spend within the tenant's current budget window (the one
LiteLLM resets at the team's budget_reset_at) over its budget.

Exit codes: 0 every row's spend is the Plan's price of its tokens; 1 a row's
is not (or names a model the Plan does not serve): the rows are printed and
each disagreement named; 2 showback cannot run as asked (invalid spec, bad
--since, no local stack, a database that cannot be read).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tenantry.cli.output import EXIT_INVALID_SPEC, add_command, print_error, print_spec_error, stdout_console
from tenantry.findings import SpecError

if TYPE_CHECKING:
    from tenantry.showback import Showback

EXIT_AGREES, EXIT_DISAGREES, EXIT_CANNOT_RUN = 0, 1, EXIT_INVALID_SPEC
FORMATS = ("table", "csv", "json")


def add_parser(commands: argparse._SubParsersAction) -> None:
    paragraphs = __doc__.strip().split("\n\n")
    showback = add_command(commands, "showback", "spend per tenant and engine from LiteLLM's records: tokens, USD, "
                           "share of the GPU bill, budget used, checked against the Plan's prices", __doc__,
                           description="\n\n".join(paragraphs[1:-1]))
    showback.add_argument("stack", metavar="STACK", help="a stack file or a stack name: its Plan prices the tokens")
    showback.add_argument("--since", default="1d", metavar="DURATION",
                          help="the period, back from now: a number and s, m, h, d, w or mo (90m, 12h, 7d, 1mo; "
                          "default 1d)")
    showback.add_argument("--format", choices=FORMATS, default="table", help="table (default), csv or json")
    showback.add_argument("--database-url", metavar="URL",
                          help="LiteLLM's PostgreSQL (postgresql://USER:PASSWORD@HOST:PORT/DB; PGPASSWORD works "
                          "too) instead of the local stack's")
    showback.add_argument("--prometheus", metavar="URL",
                          help="a Prometheus that scrapes the engines (http://HOST:9090): an autoscaled engine is "
                          "billed for the replicas it ran, counted there, instead of its floor")
    showback.add_argument("--dir", metavar="DIR", help="the local stack's state directory (default .local)")
    showback.add_argument("--port-base", type=int, metavar="PORT", help="the local stack's first port")
    showback.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tenantry.showback import Period, ShowbackError, before, read_replica_hours, read_spend, showback
    from tenantry.stacks import plan_stack, stack_path

    end = datetime.now(UTC).replace(tzinfo=None)  # LiteLLM writes UTC without a zone
    try:
        plan = plan_stack(args.stack)
        try:
            period = Period(start=before(end, args.since), end=end)
        except ValueError as error:
            raise ShowbackError(f"--since {error}") from None
        database_url = args.database_url or _local_database_url(args, stack_path(args.stack))
        replica_hours = read_replica_hours(args.prometheus, plan, period) if args.prometheus else None
        report = showback(plan, period, read_spend(database_url, plan, period), replica_hours)
    except SpecError as error:
        print_spec_error(error, args.format == "json")
        return EXIT_INVALID_SPEC
    except ShowbackError as error:
        print_error(str(error))
        return EXIT_CANNOT_RUN
    return show(report, args.format)


def show(report: Showback, output_format: str) -> int:
    """Print the report in the format asked; the exit code says whether every row agrees with the Plan."""
    _PRINTERS[output_format](report)
    return EXIT_AGREES if report.prices_agree else EXIT_DISAGREES


def _local_database_url(args: argparse.Namespace, stack_file: Path) -> str:
    """The local stack's database, as its gateways reach it (tenantry/local/credentials.py)."""
    from tenantry.local.credentials import database_url
    from tenantry.local.layout import Layout, State
    from tenantry.showback import ShowbackError

    layout = Layout.from_environment(args.dir, args.port_base)
    state = State.load(layout)
    if state is None:
        raise ShowbackError(f"no local stack was started from {layout.root}: start it with `tenantry local up "
                            f"{args.stack}`, use --dir, or read a cluster's records with --database-url URL")
    if Path(state.spec).resolve() != stack_file.resolve():
        raise ShowbackError(f"the local stack in {layout.root} runs {state.spec}, not {stack_file}: its spend is "
                            f"priced by {state.spec} (`tenantry showback {state.spec}`), or use --dir")
    return database_url(layout, state.ports["postgres"])


def _usd(usd: float | None) -> str:
    if usd is None:
        return "-"
    return f"{usd:,.2f}" if usd == 0 or abs(usd) >= 0.01 else f"{usd:.2e}"


def _share(fraction: float | None) -> str:
    if fraction is None:
        return "-"
    return f"{fraction:.2%}" if fraction == 0 or fraction >= 0.0001 else "<0.01%"


def _table(title: str, *columns: str, left: int) -> Table:
    """Names in the first `left` columns, left-aligned; figures after them."""
    table = Table(title=title, title_justify="left", title_style="bold")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < left else "right", no_wrap=True)
    return table


def print_table(report: Showback, console: Console | None = None) -> None:
    console = console or stdout_console()
    period = report.period
    console.print(f"[bold]tenantry showback[/bold] · stack [bold]{report.stack}[/bold] · "
                  f"{period.start:%Y-%m-%d %H:%M} to {period.end:%Y-%m-%d %H:%M} UTC ({period.hours:,.1f} h)")
    rows = _table("Per tenant and engine", "tenant", "engine", "requests", "tokens in", "tokens out", "spend USD",
                  "Plan prices", "GPU bill USD", "GPU share", "budget used", left=2)
    for r in report.rows:
        check = Text("✓", style="green") if r.price_agrees else Text(f"✗ {_usd(r.plan_usd)}", style="red")
        rows.add_row(r.tenant, r.engine, f"{r.requests:,}", f"{r.prompt_tokens:,}", f"{r.completion_tokens:,}",
                     _usd(r.spend_usd), check if r.requests else Text("-"), _usd(r.gpu_bill_usd),
                     _share(r.gpu_bill_share), _share(r.budget_used))
    console.print(rows)
    tenants = _table("Per tenant", "tenant", "tier", "budget / window", "requests", "tokens in", "tokens out",
                     "spend USD", "GPU bill USD", "budget used", left=2)
    for t in report.tenants:
        budget = f"{_usd(t.budget_usd)} / {t.budget_window}" if t.budget_usd is not None else "-"
        tenants.add_row(t.tenant, t.tier, budget, f"{t.requests:,}", f"{t.prompt_tokens:,}", f"{t.completion_tokens:,}",
                        _usd(t.spend_usd), _usd(t.gpu_bill_usd), _share(t.budget_used))
    console.print(tenants)
    engines = _table("Per engine", "engine", "USD per hour", "replica-hours", "GPU bill USD",
                     "tokens at Plan prices USD", "utilisation", left=1)
    for e in report.engines:
        engines.add_row(e.engine, _usd(e.usd_per_hour), f"{e.replica_hours:,.2f}", _usd(e.bill_usd), _usd(e.plan_usd),
                        _share(e.utilisation))
    console.print(engines)
    for warning in report.warnings:
        console.print(Text(f"⚠ {warning}", style="yellow"), soft_wrap=True)


CSV_COLUMNS = ("tenant", "tier", "engine", "requests", "prompt_tokens", "completion_tokens", "spend_usd",
               "plan_usd", "price_agrees", "gpu_bill_usd", "gpu_bill_share", "budget_used")


def print_csv(report: Showback) -> None:
    """One row per tenant and engine on stdout; the warnings on stderr, so the CSV stays clean."""
    writer = csv.writer(sys.stdout)
    writer.writerow(CSV_COLUMNS)
    for row in report.to_dict()["rows"]:
        writer.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])
    for warning in report.warnings:
        print_error(f"⚠ {warning}")


def print_json(report: Showback) -> None:
    print(json.dumps(report.to_dict(), indent=2))


_PRINTERS = {"table": print_table, "csv": print_csv, "json": print_json}
