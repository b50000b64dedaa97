"""What tenantry's policy changes under a noisy neighbour: the guaranteed
tenant's p95 time to first token, alone and under a 5x spot flood, with the
policy and through plain LiteLLM to vLLM (first come first served), in one
run, repeated.

    .venv/bin/python benchmarks/noisy_neighbour.py [--repeats 2] [--full]

Starts its own stack of stacks/local.yaml (directory .local/bench-gate,
ports from 19600; the models must be built already, as after `make local`)
and runs `tenantry gate --scenario noisy-neighbour --side-by-side` (20 s alone
and a 60 s flood, as the recorded figures were measured, unless --full)
--repeats times. Reports each repeat's figures and
the ratio with / without the policy under the flood, against its target
(docs/decisions.md: Noisy-neighbour target: 0.1x).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tenantry.gate.report import ttft_comparison  # noqa: E402
from tenantry.gate.scenario_model import with_stage_seconds  # noqa: E402
from tenantry.gate.scenarios import BENCHMARK_NOISY_NEIGHBOUR_SECONDS  # noqa: E402
from tenantry.gate.run import gate, prepare  # noqa: E402
from tenantry.local import stack as local  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, Layout  # noqa: E402
from tenantry.local.target import side_by_side_targets  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="the full scenario (6 minutes a side) instead of 90 s")
    args = parser.parse_args()
    layout = Layout.from_environment(DEFAULT_DIR / "bench-gate", 19600)
    stack = ROOT / "stacks" / "local.yaml"
    local.down(layout, purge=True, progress=lambda _: None)
    console = Console(width=200)
    try:
        local.up(str(stack), layout, progress=lambda line: print("  " + line))
        rows = []
        for repeat in range(1, args.repeats + 1):
            out = layout.root / f"repeat-{repeat}"
            prepared = prepare(str(stack), "noisy-neighbour", short=not args.full, tenant=None)
            if not args.full:
                stretched = with_stage_seconds(prepared.scenario, BENCHMARK_NOISY_NEIGHBOUR_SECONDS)
                prepared = dataclasses.replace(prepared, scenario=stretched)
            gate(prepared, side_by_side_targets(layout, prepared.plan, prepared.stack_file), out=out,
                 short=not args.full, tenant=None, console=console)
            on, off = (json.loads((out / run / "verdict.json").read_text()) for run in ("policy-on", "policy-off"))
            pairs = {(stage, tenant): (a, b) for stage, tenant, tier, a, b in ttft_comparison(on, off)
                     if tier == "guaranteed"}
            rows += [(repeat, tenant, *pairs[("alone", tenant)], *pairs[("flood", tenant)])
                     for stage, tenant in pairs if stage == "flood"]
        print("\nguaranteed tenant's p95 time to first token (ms)")
        print(f"{'repeat':<7} {'tenant':<10} {'alone, policy':>14} {'alone, plain':>13} {'flood, policy':>14} "
              f"{'flood, plain':>13} {'flood ratio':>12} {'flood/alone (policy)':>21}")
        for repeat, tenant, alone_on, alone_off, flood_on, flood_off in rows:
            print(f"{repeat:<7} {tenant:<10} {alone_on * 1000:>14.0f} {alone_off * 1000:>13.0f} {flood_on * 1000:>14.0f} "
                  f"{flood_off * 1000:>13.0f} {flood_on / flood_off:>11.2f}x {flood_on / alone_on:>20.1f}x")
        ratios = [r[4] / r[5] for r in rows]
        print(f"\nmedian flood ratio with / without the policy: {statistics.median(ratios):.2f}x (target 0.1x or less)")
        print(f"reports: {layout.root}/repeat-*/report.html")
    finally:
        local.down(layout, purge=False, progress=lambda _: None)  # keeps the reports; `--purge` them by hand


if __name__ == "__main__":
    main()
