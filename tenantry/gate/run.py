"""`tenantry gate STACK --scenario NAME`: run one scenario headless with
Locust against one target, or two side by side, print each tenant's
verdict, write the report.

A target (tenantry/gate/target.py) is the local stack, any gateway given by
URL and keys, or for `--side-by-side` two LiteLLM processes started beside
the local stack alike (the same config, keys, database and engines): one
with tenantry's policy, one without the tenant-policy plugin, where no
request carries a priority and vLLM serves them first come first served.
The report shows both, with their ratio.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from tenantry.gate.records import RUN_JSON, VERDICT_JSON, WARM_UP_JSONL, Record, read_records, write_jsonl
from tenantry.gate.report import RunView, load_cell, tier_tokens, ttft_comparison, write_report
from tenantry.gate.scenario_model import Scenario
from tenantry.gate.target import GateError, Target, read_keys
from tenantry.gate.verdict import ms
from tenantry.plan.model import Plan

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
REPO = LOCUSTFILE.parents[2]


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    view: RunView


@dataclass(frozen=True)
class Prepared:
    stack_file: Path
    plan: Plan
    scenario: Scenario


def prepare(stack: str, scenario_name: str, *, short: bool, tenant: str | None,
            repeat_prompts: bool = False, latency_judged: bool = True) -> Prepared:
    """The stack's plan (it must fit) and the scenario built from it, before any target is made;
    `repeat_prompts` sends every earlier run's prompts instead of the run's own (Scenario.repeat_prompts);
    `latency_judged` False reports latency against the SLOs without judging it (Scenario.latency_judged)."""
    from tenantry.gate.scenario_model import ScenarioError
    from tenantry.gate.scenarios import scenario as build_scenario
    from tenantry.stacks import plan_stack, require_fit, stack_path

    stack_file = stack_path(stack)
    plan = require_fit(plan_stack(stack_file))
    try:
        scenario = build_scenario(scenario_name, plan, short=short, tenant=tenant)
    except ScenarioError as error:
        raise GateError(str(error)) from None
    scenario = replace(scenario, repeat_prompts=repeat_prompts, latency_judged=latency_judged)
    return Prepared(stack_file, plan, scenario)


def warm_up(plan: Plan, target: Target, echo=print, rounds: int = 2, quota_wait_seconds: float = 75) -> list[Record]:
    """A few unmeasured requests per tenant and gateway before the run: a gateway's
    first requests for a key load it from the database, and a key the gateway
    refuses is a clear error now instead of a run of 401s. A tenant still over
    its quota from earlier traffic (the gateway's RPM and TPM windows are a
    minute long) is waited for, so that a run starts from fresh windows.
    Returns the answered ones, with their cost: the gateway charges them too."""
    import httpx

    from tenantry.gate.verdict import SHED_HEADER
    from tenantry.showback import model_prices

    keys, prices, answered = read_keys(target), model_prices(plan), []
    for url in target.gateways:
        with httpx.Client(base_url=url, timeout=120) as client:
            for tenant in plan.tenants:
                body = {"model": tenant.traffic[0].target, "messages": [{"role": "user", "content": "warm up"}],
                        "max_tokens": 1}
                deadline, sent, announced = time.monotonic() + quota_wait_seconds, 0, False
                while sent < rounds:
                    try:
                        answer = client.post("/v1/chat/completions", json=body,
                                             headers={"Authorization": f"Bearer {keys[tenant.name]}"})
                    except httpx.HTTPError as error:
                        raise GateError(f"gateway {url} does not answer: {error}") from None
                    if answer.status_code in (401, 403):
                        raise GateError(f"gateway {url} refuses tenant {tenant.name}'s key for {body['model']}: "
                                        f"HTTP {answer.status_code} {answer.text[:200]}")
                    if answer.status_code == 429 and not answer.headers.get(SHED_HEADER):
                        if time.monotonic() > deadline:
                            raise GateError(f"tenant {tenant.name} stays over its quota at {url}: {answer.text[:200]}")
                        if not announced:
                            echo(f"tenant {tenant.name} is over its quota from earlier traffic: waiting for its "
                                 "window to reset")
                            announced = True
                        time.sleep(5)
                        continue
                    sent += 1
                    if answer.status_code == 200:
                        record = Record(tenant=tenant.name, tier=tenant.tier, profile="warm-up", target=body["model"],
                                        stage="warm-up", sent=0.0, streamed=False, status=200, e2e=0.0)
                        record.read_usage(answer.json(), prices)
                        answered.append(record)
    return answered


def prompt_seed(scenario: Scenario) -> str:
    """A seed of the run's own for its prompts, so that none is in an engine's prefix cache from an earlier run
    (two side-by-side runs each get one too); "" when the scenario repeats prompts (docs/decisions.md: Each gate
    run draws its own prompts)."""
    return "" if scenario.repeat_prompts else secrets.token_hex(8) + ":"


def run_locust(prepared: Prepared, target: Target, out: Path, short: bool, tenant: str | None,
               echo=print) -> RunResult:
    """One headless Locust run into `out`; its exit code is the verdict."""
    plan, stack_file, scenario = prepared.plan, prepared.stack_file, prepared.scenario
    out.mkdir(parents=True, exist_ok=True)
    settings = {"stack": str(stack_file.resolve()), "scenario": scenario.name, "short": short, "tenant": tenant,
                "gateways": target.gateways, "keys": str(target.keys_file.resolve()), "out": str(out.resolve()),
                "fault_commands": target.fault_commands, "label": target.label,
                "stage_seconds": [stage.seconds for stage in scenario.stages],  # as run, if a caller stretched one
                "prompt_seed": prompt_seed(scenario), "engine_metrics": target.engine_metrics,
                "latency_judged": scenario.latency_judged}
    (out / RUN_JSON).write_text(json.dumps(settings, indent=1), encoding="utf-8")
    (out / VERDICT_JSON).unlink(missing_ok=True)
    env = {**os.environ, "TENANTRY_GATE_RUN": str(out / RUN_JSON),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    since = datetime.now(timezone.utc).replace(microsecond=0)  # LiteLLM stamps its records by the wall clock
    write_jsonl(out / WARM_UP_JSONL, warm_up(plan, target, echo))
    echo(f"{target.label}: scenario {scenario.name}, {scenario.seconds:.0f} s "
         f"({', '.join(f'{s.name} {s.seconds:.0f} s' for s in scenario.stages)}) against {', '.join(target.gateways)}")
    with (out / "locust.log").open("w") as log:
        done = subprocess.run([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
                               "--csv", str(out / "locust"), "--loglevel", "WARNING"], env=env, stdout=log,
                              stderr=subprocess.STDOUT, timeout=scenario.seconds + 600, check=False, cwd=out)
    if not (out / VERDICT_JSON).exists():
        raise GateError(f"Locust ended (exit {done.returncode}) without a verdict: see {out / 'locust.log'}")
    verdict, exit_code = json.loads((out / VERDICT_JSON).read_text()), done.returncode
    if target.database_url:
        verdict, exit_code = _reconciled(prepared, target.database_url, since, out, verdict, exit_code)
    view = RunView(target.label, out, read_records(out), verdict)
    return RunResult(exit_code, view)


def _reconciled(prepared: Prepared, database_url: str, since: datetime, out: Path, verdict: dict,
                exit_code: int) -> tuple[dict, int]:
    """The verdict with the spend-reconciles check (tenantry/gate/spend.py), written back."""
    from dataclasses import asdict

    from tenantry.gate.spend import kill_window, reconcile, recorded_requests

    killed = prepared.scenario.fault_at("kill-gateway")
    window = kill_window((int(killed[0].subject), killed[1]) if killed else None, verdict.get("actions", []))
    check = reconcile(read_records(out) + read_records(out, WARM_UP_JSONL),
                      lambda: recorded_requests(database_url, since), killed=window)
    verdict = {**verdict, "checks": [*verdict["checks"], asdict(check)], "passed": verdict["passed"] and check.passed}
    (out / VERDICT_JSON).write_text(json.dumps(verdict, indent=1), encoding="utf-8")
    return verdict, exit_code if check.passed else max(exit_code, 1)


def default_out(base: Path, stack: str, scenario: str) -> Path:
    return base / f"{stack}-{scenario}-{time.strftime('%Y%m%d-%H%M%S')}"


def print_verdict(view: RunView, console) -> None:
    from rich.table import Table

    v = view.verdict
    table = Table(title=f"{view.label}: scenario {v['scenario']} — {'PASS' if v['passed'] else 'FAIL'}",
                  title_justify="left")
    for column in ("tenant", "tier", "sent", "ok", "429 quota/shed", "errors / SLO", "TTFT p95 ms / SLO",
                   "prompt cached", "ITL p95 ms / SLO", "goodput req/s", "verdict"):
        table.add_column(column, justify="left" if column in ("tenant", "tier", "verdict") else "right")

    for f in v["tenants"].values():
        verdict = "not judged" if f["passed"] is None else ("[green]PASS[/]" if f["passed"] else "[red]FAIL[/]")
        if f["reasons"]:
            verdict += ": " + "; ".join(f["reasons"])
        if f.get("notes"):
            verdict += " (latency reported, not judged: " + "; ".join(f["notes"]) + ")"
        table.add_row(f["tenant"], f["tier"], str(f["requests"]), str(f["succeeded"]),
                      f"{f['quota_429']}/{f['shed_429']}", f"{f['error_rate']:.1%} / {f['slo_max_error_rate']:.1%}",
                      f"{ms(f['ttft_p95'])} / {ms(f['slo_ttft_p95'])}", share(f.get("cached_share")),
                      f"{ms(f['itl_p95'])} / {ms(f['slo_itl_p95'])}", f"{f['goodput']:.2f}", verdict)
    console.print(table)
    if len(v.get("stages", {})) > 1:
        console.print(stage_table(v["stages"]))
    if v.get("engines"):
        console.print(price_of_isolation_table(v))
    for check in v["checks"]:
        mark = "[green]PASS[/]" if check["passed"] else "[red]FAIL[/]"
        console.print(f"  check {check['name']}: {mark} — {check['detail']}", soft_wrap=True, highlight=False)


def share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def stage_table(stages: dict[str, dict[str, dict]]):
    """Each stage's time to first token per tenant that sent anything in it, with the share of its prompt
    tokens found cached: the TTFT a stage measured depends on it."""
    from rich.table import Table

    table = Table(title="by stage", title_justify="left")
    for column in ("stage", "tenant", "sent", "ok", "TTFT p50 ms", "TTFT p95 ms", "prompt cached"):
        table.add_column(column, justify="left" if column in ("stage", "tenant") else "right")
    for stage, tenants in stages.items():
        for f in tenants.values():
            if f["requests"]:
                table.add_row(stage, f["tenant"], str(f["requests"]), str(f["succeeded"]),
                              ms(f["ttft_p50"]), ms(f["ttft_p95"]), share(f.get("cached_share")))
    return table


def price_of_isolation_table(v: dict):
    """By stage: the tokens each tier was served beside how busy each engine was (vLLM's own gauges) and the
    guaranteed tenants' p95 time to first token: what the policy's protection costs the lower tiers."""
    from rich.table import Table

    engines = sorted({e for stage in v["engines"].values() for e in stage})
    table = Table(title="price of isolation, by stage", title_justify="left")
    for column in ("stage", "guaranteed tok/s", "best-effort tok/s", "spot tok/s",
                   *(f"{e} busy / running (answered)" for e in engines), "guaranteed TTFT p95 ms"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage, tenants in v["stages"].items():
        served, load = tier_tokens(tenants), v["engines"].get(stage, {})
        p95s = [f["ttft_p95"] for f in tenants.values() if f["tier"] == "guaranteed" and f["ttft_p95"] is not None]
        table.add_row(stage, *(f"{served.get(tier, 0.0):.1f}" for tier in ("guaranteed", "best-effort", "spot")),
                      *(load_cell(load.get(e)) for e in engines), ms(max(p95s) if p95s else None))
    return table


def print_comparison(on: RunView, off: RunView, console) -> None:
    for stage, name, _tier, a, b in ttft_comparison(on.verdict, off.verdict):
        if a and b:
            console.print(f"  {stage:<10} {name:<12} TTFT p95 {a * 1000:8,.0f} ms with the policy, "
                          f"{b * 1000:8,.0f} ms without: {a / b:.2f}x", highlight=False)


def run_targets(prepared: Prepared, targets: list[Target], out: Path, short: bool, tenant: str | None,
                echo=print) -> tuple[list[RunResult], list[str]]:
    """One run per target, into `out` (or `out`/<slug> for several); each target
    is closed once its run is over (and every one at the end, however the runs
    went), its engines restored.
    Returns the results and, for each target whose gateway was lost, why."""
    results: list[RunResult] = []
    lost: list[str] = []
    try:
        for target in targets:
            if results:
                target.restore_engines(echo)  # the run before may have stopped one
            directory = out / target.slug if len(targets) > 1 else out
            results.append(run_locust(prepared, target, directory, short, tenant, echo))
            if reason := target.lost():
                lost.append(f"{target.label}: {reason}; its figures measure a lost gateway")
            # Released before the next run: a side gateway is 0.75 GB, and the plain run after the policy's, beside
            # three local stacks in make test (3 GB of 24 left), stalled its load generator for 82 s.
            target.close()
    finally:
        for target in targets:
            target.close()
        for target in targets:
            target.restore_engines(echo)
    return results, lost


def gate(prepared: Prepared, targets: list[Target], *, out: Path, short: bool, tenant: str | None, console) -> bool:
    """Run the scenario against each target (one, or two side by side), print the
    verdicts and the comparison, write the report. True when the first target passed."""
    plan, scenario = prepared.plan, prepared.scenario
    for stage in scenario.stages:
        if stage.fault and stage.fault.kind not in targets[0].fault_commands:
            console.print(f"[yellow]no command for {stage.fault.kind} (--fault {stage.fault.kind}=COMMAND): "
                          f"do it yourself ({stage.fault.describe()}) when the '{stage.name}' stage starts[/]")
    results, lost = run_targets(prepared, targets, out, short, tenant, console.print)
    views = [r.view for r in results]
    for view in views:
        print_verdict(view, console)
    if len(views) == 2:
        print_comparison(*views, console)
    for line in lost:
        console.print(f"[red]{line}[/]", highlight=False, soft_wrap=True)
    notes = [f"stack {plan.stack} ({prepared.stack_file}), scenario {scenario.name}: {scenario.summary}.",
             f"{'short (CI) version, ' if short else ''}{scenario.seconds:.0f} s: "
             + ", ".join(f"{s.name} {s.seconds:.0f} s" for s in scenario.stages) + ".",
             *([] if scenario.latency_judged else ["Latency is reported against each SLO, not judged (--latency "
                                                   "reported): the checks judge it as a ratio within the run."]),
             *lost]
    report = write_report(out / "report.html", f"tenantry gate: {plan.stack} / {scenario.name}", views, notes)
    console.print(f"report: {report}", highlight=False, soft_wrap=True)
    return results[0].exit_code == 0
