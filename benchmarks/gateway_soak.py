"""Does LiteLLM crash under a long flood? The noisy-neighbour flood held for
--minutes (20 by default) against the local stack's gateways, counting the
processes that died of a signal and collecting what faulthandler printed.
With --scenario, another scenario's short version (a fault: redis-outage,
database-outage, gateway-killed, ...) is run again and again for --minutes
instead: the gateway crashes seen in CI came from full test runs, which
stop and start Redis, PostgreSQL and the gateways under load.

    .venv/bin/python benchmarks/gateway_soak.py [--minutes 20] [--stack tests/local/stack.yaml] [--scenario NAME]

Starts its own stack (directory .local/bench-soak, ports from 19800; the
models must be built already, as after `make local`) with the gateway's
PYTHONFAULTHANDLER on (it always is: tenantry/configs/litellm.py,
GATEWAY_ENVIRONMENT) and core dumps allowed, then runs the noisy-neighbour
scenario with its flood stage stretched to --minutes: the guaranteed tenants
steady, the first spot tenant at 5x its contract. supervisord restarts a
crashed gateway; the run counts each crash from supervisord's log
("terminated by SIG…") and prints every "Fatal Python error" block from the
gateways' logs with its native and Python stacks. Figures: crashes, requests
sent, crashes per 10,000 requests, the gateway's resident memory at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import resource
import sys
import time
from collections import Counter
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tenantry.gate.records import read_records  # noqa: E402
from tenantry.gate.run import gate, prepare  # noqa: E402
from tenantry.gate.scenarios import SCENARIOS  # noqa: E402
from tenantry.local import stack as local  # noqa: E402
from tenantry.local.health import tree_resident_mib  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, Layout  # noqa: E402
from tenantry.local.supervisor import crashes  # noqa: E402
from tenantry.local.target import local_target  # noqa: E402

FLOOD = "noisy-neighbour"
FATAL = re.compile(r"^Fatal Python error:.*?(?=^\S.*INFO:|\Z)", re.M | re.S)


def fatal_reports(layout: Layout) -> list[str]:
    reports = []
    for log in sorted(layout.logs.glob("gateway-*.log")):
        reports += [f"{log.name}: {block[:4000]}" for block in FATAL.findall(log.read_text(errors="replace"))]
    return reports


def resident_mib(layout: Layout) -> dict[str, float]:
    return {status.name: tree_resident_mib(status.pid) for status in local.status(layout)
            if status.name.startswith("gateway-") and status.pid}


def soak(layout: Layout, stack: str, scenario: str, minutes: float, out: Path, console: Console) -> list[Path]:
    """The flood stretched to `minutes`, or the scenario's short version run until `minutes` have passed;
    the runs' directories."""
    prepared = prepare(stack, scenario, short=True, tenant=None)
    target = local_target(layout, prepared.plan, prepared.stack_file)
    if scenario == FLOOD:
        alone, flood = prepared.scenario.stages
        stretched = dataclasses.replace(prepared.scenario, stages=(alone, dataclasses.replace(
            flood, seconds=minutes * 60)))
        gate(dataclasses.replace(prepared, scenario=stretched), [target], out=out, short=True, tenant=None,
             console=console)
        return [out]
    runs, deadline = [], time.monotonic() + minutes * 60
    while time.monotonic() < deadline:
        runs.append(out / f"run-{len(runs) + 1}")
        gate(prepared, [target], out=runs[-1], short=True, tenant=None, console=console)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--stack", default=str(ROOT / "tests" / "local" / "stack.yaml"))
    parser.add_argument("--scenario", default=FLOOD, choices=sorted(SCENARIOS),
                        help=f"{FLOOD} (default): its flood held for --minutes; another: its short version repeated")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))  # inherited
    layout = Layout.from_environment(DEFAULT_DIR / "bench-soak", 19800)
    local.down(layout, purge=True, progress=lambda _: None)
    console = Console(width=200)
    try:
        local.up(args.stack, layout, progress=lambda line: print("  " + line))
        before = crashes(layout)
        out = layout.root / "soak"
        runs = soak(layout, args.stack, args.scenario, args.minutes, out, console)
        died = crashes(layout)[len(before):]
        sent = sum(len(read_records(run)) for run in runs)
        what = "flood" if args.scenario == FLOOD else f"{args.scenario}, {len(runs)} runs"
        # By signal: a scenario that kills (kill-gateway, kill-engine) accounts for its own SIGKILLs.
        signals = Counter(match.group(1) for line in died if (match := re.search(r"terminated by (SIG\w+)", line)))
        print(f"\n{args.minutes:g} min of {what}: {sent} requests, {len(died)} process(es) died of a signal "
              f"({len(died) / max(sent, 1) * 10_000:.2f} per 10,000 requests; "
              f"{', '.join(f'{n} {name}' for name, n in sorted(signals.items())) or 'none'})")
        for line in died:
            print("  " + line)
        for report in fatal_reports(layout):
            print("\n" + report)
        for core in sorted(p for p in layout.root.rglob("core*") if p.is_file()):  # kernel.core_pattern "core"
            print(f"core dump: {core} ({core.stat().st_size / 2**20:.0f} MiB)")
        print("gateways' resident memory at the end (MiB): "
              + ", ".join(f"{name} {mib:.0f}" for name, mib in resident_mib(layout).items()))
        print(f"report: {out}/report.html; logs: {layout.logs}")
    finally:
        local.down(layout, purge=False, progress=lambda _: None)  # keeps logs and report; `--purge` them by hand


if __name__ == "__main__":
    main()
