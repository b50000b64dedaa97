"""Does LiteLLM crash under a long flood? The noisy-neighbour flood held for
--minutes (20 by default) against the local stack's gateways, counting the
processes that died of a signal and collecting what faulthandler printed.

    .venv/bin/python benchmarks/gateway_soak.py [--minutes 20] [--stack tests/local/stack.yaml]

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
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tenantry.gate.records import read_records  # noqa: E402
from tenantry.gate.run import gate, prepare  # noqa: E402
from tenantry.local import stack as local  # noqa: E402
from tenantry.local.health import tree_resident_mib  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, Layout  # noqa: E402
from tenantry.local.supervisor import crashes  # noqa: E402
from tenantry.local.target import local_target  # noqa: E402

FATAL = re.compile(r"^Fatal Python error:.*?(?=^\S.*INFO:|\Z)", re.M | re.S)


def fatal_reports(layout: Layout) -> list[str]:
    reports = []
    for log in sorted(layout.logs.glob("gateway-*.log")):
        reports += [f"{log.name}: {block[:4000]}" for block in FATAL.findall(log.read_text(errors="replace"))]
    return reports


def resident_mib(layout: Layout) -> dict[str, float]:
    return {status.name: tree_resident_mib(status.pid) for status in local.status(layout)
            if status.name.startswith("gateway-") and status.pid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--stack", default=str(ROOT / "tests" / "local" / "stack.yaml"))
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))  # inherited
    layout = Layout.from_environment(DEFAULT_DIR / "bench-soak", 19800)
    local.down(layout, purge=True, progress=lambda _: None)
    console = Console(width=200)
    try:
        local.up(args.stack, layout, progress=lambda line: print("  " + line))
        prepared = prepare(args.stack, "noisy-neighbour", short=True, tenant=None)
        alone, flood = prepared.scenario.stages
        soak = dataclasses.replace(prepared.scenario, stages=(alone, dataclasses.replace(
            flood, seconds=args.minutes * 60)))
        prepared = dataclasses.replace(prepared, scenario=soak)
        before = crashes(layout)
        out = layout.root / "soak"
        gate(prepared, [local_target(layout, prepared.plan, prepared.stack_file)], out=out, short=True,
             tenant=None, console=console)
        died = crashes(layout)[len(before):]
        sent = len(read_records(out))
        print(f"\n{args.minutes:g} min of flood: {sent} requests, {len(died)} process(es) died of a signal "
              f"({len(died) / max(sent, 1) * 10_000:.2f} per 10,000 requests)")
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
