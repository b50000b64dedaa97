"""Spot's knobs side by side in one run: what each costs the guaranteed tenant and what it gives spot.

    .venv/bin/python benchmarks/spot_frontier.py [--settings fcfs,pause,none,cap-0,cap-1,cap-2,cap-4] [--rounds 1]

Starts its own stack (stacks/local.yaml, directory .local/bench-frontier, ports from 19600; the models must be
built already, as after `make local`) and beside it one LiteLLM per setting, started the same way and differing
only in the tenant-policy plugin's settings:

  fcfs    no plugin: no tiers, no priority; vLLM serves first come, first served
  pause   the Plan's settings: spot paused while another tier asked for the engine within the last 10 s
  none    no pause and no cap: spot may take every unreserved slot while the engine looks idle
  cap-N   no pause; spot capped at N sequences per engine (tiers.spot.max_engine_slots)

Each setting runs the gate's noisy-neighbour scenario, with the stages the recorded figures were measured with (acme,
guaranteed, steady for 20 s alone, then 60 s with initech, spot, flooding at five times its contract; the tests' short
version floods 30 s), one setting after another; with --rounds 2
the order is reversed for the second round, so the shared machine's drift lands on every setting. Printed per
setting, from the flood stage (medians over rounds): acme's p95 time to first token and its ratio to fcfs,
the output tokens per second spot was served, and engine tiny's busy share.
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

from tenantry.gate.scenario_model import with_stage_seconds  # noqa: E402
from tenantry.gate.scenarios import BENCHMARK_NOISY_NEIGHBOUR_SECONDS  # noqa: E402
from tenantry.gate.run import prepare, run_targets  # noqa: E402
from tenantry.local import side_gateways  # noqa: E402
from tenantry.local import stack as local  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, Layout  # noqa: E402
from tenantry.local.target import LocalTarget, side_target  # noqa: E402

STACK = ROOT / "stacks" / "local.yaml"
SETTINGS = ("fcfs", "pause", "none", "cap-0", "cap-1", "cap-2", "cap-4")
FLOOD = "flood"


def policy_for(setting: str, rendered: dict) -> dict | None:
    """The plugin's settings for one setting (None: no plugin), from the stack's own."""
    if setting == "fcfs":
        return None
    policy = json.loads(json.dumps(rendered))
    if setting != "pause":
        policy["admission"]["spot_pause_after_others_seconds"] = 0
    for engine in policy["engines"].values():
        engine["tier_slots"] = {"spot": int(setting.removeprefix("cap-"))} if setting.startswith("cap-") else {}
    return policy


def flood_figures(verdict: dict) -> tuple[float | None, float, float | None]:
    """(acme's p95 TTFT s, spot's output tokens/s, engine tiny's busy share) in the flood stage."""
    stage = verdict["stages"][FLOOD]
    guaranteed = [f["ttft_p95"] for f in stage.values() if f["tier"] == "guaranteed" and f["ttft_p95"] is not None]
    spot = sum(f["output_tokens_per_s"] for f in stage.values() if f["tier"] == "spot")
    busy = verdict.get("engines", {}).get(FLOOD, {}).get("tiny", {}).get("busy")
    return (max(guaranteed) if guaranteed else None), spot, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    settings = args.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS and not s.startswith("cap-")]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)} (any cap-N)")
    console = Console()
    layout = Layout.from_environment(DEFAULT_DIR / "bench-frontier", 19600)
    local.down(layout, purge=True, progress=lambda _: None)
    local.up(str(STACK), layout, progress=lambda line: print("  " + line))
    prepared = prepare(str(STACK), "noisy-neighbour", short=True, tenant=None)
    stretched = with_stage_seconds(prepared.scenario, BENCHMARK_NOISY_NEIGHBOUR_SECONDS)
    prepared = dataclasses.replace(prepared, scenario=stretched)
    rendered = json.loads((layout.gateway / "tenant-policy.json").read_text(encoding="utf-8"))
    targets: dict[str, LocalTarget] = {}
    figures: dict[str, list[tuple[float | None, float, float | None]]] = {s: [] for s in settings}
    try:
        for i, setting in enumerate(settings):
            # One at a time: several LiteLLMs starting at once on two cores outlast the start-up wait. Ports from
            # +70: clear of the stack's own (gateways +0..+9, engines from +10, the alert receiver at +93).
            target = targets[setting] = side_target(layout, prepared.plan, f"gateway-{setting}",
                                                    layout.port_base + 70 + i, setting, setting,
                                                    plugin=setting != "fcfs", policy=policy_for(setting, rendered))
            side_gateways.wait_side_gateway(layout, target.side_gateway[0], target.gateways[0], target.side_gateway[1])
        for round_number in range(args.rounds):
            order = settings if round_number % 2 == 0 else list(reversed(settings))
            for setting in order:
                out = layout.root / "frontier" / f"round-{round_number + 1}" / setting
                # run_targets closes what it ran: hand it a copy that leaves the side gateway running.
                target = targets[setting]
                results, lost = run_targets(prepared, [dataclasses.replace(target, side_gateway=None)], out, True,
                                            None, console.print)
                if lost or side_gateways.side_gateway_lost(layout, *target.side_gateway):
                    console.print(f"[red]{setting}: its gateway was lost; the round's figures for it are left out[/]")
                    continue
                figures[setting].append(flood_figures(results[0].view.verdict))
                console.print(f"  round {round_number + 1}, {setting}: {figures[setting][-1]}", highlight=False)
    finally:
        for target in targets.values():
            target.close()
        local.down(layout, purge=True, progress=lambda _: None)
    print_frontier(figures, console)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def print_frontier(figures: dict[str, list[tuple[float | None, float, float | None]]], console: Console) -> None:
    from rich.table import Table

    fcfs = _median([f[0] for f in figures.get("fcfs", [])])
    table = Table(title="spot's knobs, noisy-neighbour flood stage (medians over rounds)", title_justify="left")
    for column in ("setting", "runs", "acme TTFT p95 ms", "vs fcfs", "spot tok/s", "tiny busy"):
        table.add_column(column, justify="left" if column == "setting" else "right")
    for setting, rows in figures.items():
        ttft, spot, busy = _median([r[0] for r in rows]), _median([r[1] for r in rows]), _median([r[2] for r in rows])
        table.add_row(setting, str(len(rows)), "—" if ttft is None else f"{ttft * 1000:,.0f}",
                      "—" if ttft is None or not fcfs else f"{ttft / fcfs:.2f}x",
                      "—" if spot is None else f"{spot:.1f}", "—" if busy is None else f"{busy:.0%}")
    console.print(table)


if __name__ == "__main__":
    main()
