"""`tenantry gate STACK --scenario NAME`: run one scenario headless with
Locust, print each tenant's verdict, write the report.

Against the local stack by default (its gateway, keys and engines, found
from its state directory), or against any gateway with `--gateway URL --keys
FILE`. `--side-by-side` (local only) runs the scenario twice through two
LiteLLM processes started beside the stack alike (the same config, keys,
database and engines): one with tenantry's policy, one without the
tenant-policy plugin, where no request carries a priority and vLLM serves
them first come first served. It reports both, with their ratio.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tenantry.gate.records import RUN_JSON, VERDICT_JSON, read_records
from tenantry.gate.report import RunView, ttft_comparison, write_report
from tenantry.gate.scenarios import Scenario
from tenantry.local import stack as local
from tenantry.local.layout import HOST, Layout, State
from tenantry.plan.model import Plan

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
REPO = LOCUSTFILE.parents[2]
SIDE_GATEWAY_OFFSET = 94
"""The side-by-side's two gateways listen at the local stack's port base + this and + this + 1."""
EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class GateError(Exception):
    """The gate cannot run as asked; the message says what to do."""


@dataclass(frozen=True)
class Target:
    label: str
    gateways: list[str]
    keys_file: Path
    stop_engine_command: str | None = None
    """A command with {engine}; the gate runs it when a scenario stops an engine."""


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    view: RunView


def local_target(plan: Plan, stack_file: Path, layout: Layout) -> Target:
    state = State.load(layout)
    if state is None or local.supervisor_running(layout) is None:
        raise GateError(f"no local stack runs from {layout.root}: start it with `tenantry local up {stack_file}`, "
                        "or point the gate at a gateway with --gateway URL --keys FILE")
    if Path(state.spec).resolve() != stack_file.resolve():
        raise GateError(f"the local stack in {layout.root} runs {state.spec}, not {stack_file}: start that one "
                        f"with `tenantry local up {stack_file}`, or use --dir")
    ports = layout.ports(plan)
    stop = f"{shlex.quote(str(local.SUPERVISORCTL))} -c {shlex.quote(str(layout.supervisor_conf))} stop engine-{{engine}}"
    return Target("tenantry policy", [f"http://{HOST}:{p}" for p in ports.gateways], layout.keys_file, stop)


def remote_target(gateway: str, keys: Path, plan: Plan, stop_engine: str | None) -> Target:
    if not keys.exists():
        raise GateError(f"--keys {keys}: no such file (a JSON object of tenant name to key)")
    try:
        keyed = json.loads(keys.read_text(encoding="utf-8"))
    except ValueError as error:
        raise GateError(f"--keys {keys}: not JSON ({error})") from None
    missing = [t.name for t in plan.tenants if not isinstance(keyed, dict) or t.name not in keyed]
    if missing:
        raise GateError(f"--keys {keys}: no key for tenant(s) {', '.join(missing)}")
    if not gateway.startswith(("http://", "https://")):
        raise GateError(f"--gateway {gateway}: give a URL such as https://gateway.example.com")
    return Target("gateway", [gateway.rstrip("/")], keys, stop_engine)


def warm_up(plan: Plan, target: Target, echo=print, rounds: int = 2, quota_wait_seconds: float = 75) -> None:
    """A few unmeasured requests per tenant and gateway before the run: a gateway's
    first requests for a key load it from the database, and a key the gateway
    refuses is a clear error now instead of a run of 401s. A tenant still over
    its quota from earlier traffic (the gateway's RPM and TPM windows are a
    minute long) is waited for, so that a run starts from fresh windows."""
    import httpx

    from tenantry.gate.verdict import SHED_MESSAGE

    keys = json.loads(target.keys_file.read_text(encoding="utf-8"))
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
                    if answer.status_code == 429 and not SHED_MESSAGE.search(answer.text):
                        if time.monotonic() > deadline:
                            raise GateError(f"tenant {tenant.name} stays over its quota at {url}: {answer.text[:200]}")
                        if not announced:
                            echo(f"tenant {tenant.name} is over its quota from earlier traffic: waiting for its "
                                 "window to reset")
                            announced = True
                        time.sleep(5)
                        continue
                    sent += 1


def run_locust(plan: Plan, stack_file: Path, scenario: Scenario, target: Target, out: Path, short: bool,
               tenant: str | None, echo=print) -> RunResult:
    """One headless Locust run into `out`; its exit code is the verdict."""
    out.mkdir(parents=True, exist_ok=True)
    settings = {"stack": str(stack_file.resolve()), "scenario": scenario.name, "short": short, "tenant": tenant,
                "gateways": target.gateways, "keys": str(target.keys_file.resolve()), "out": str(out.resolve()),
                "stop_engine_command": target.stop_engine_command, "label": target.label}
    (out / RUN_JSON).write_text(json.dumps(settings, indent=1), encoding="utf-8")
    (out / VERDICT_JSON).unlink(missing_ok=True)
    env = {**os.environ, "TENANTRY_GATE_RUN": str(out / RUN_JSON),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    warm_up(plan, target, echo)
    echo(f"{target.label}: scenario {scenario.name}, {scenario.seconds:.0f} s "
         f"({', '.join(f'{s.name} {s.seconds:.0f} s' for s in scenario.stages)}) against {', '.join(target.gateways)}")
    with (out / "locust.log").open("w") as log:
        done = subprocess.run([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
                               "--csv", str(out / "locust"), "--loglevel", "WARNING"], env=env, stdout=log,
                              stderr=subprocess.STDOUT, timeout=scenario.seconds + 600, check=False, cwd=out)
    if not (out / VERDICT_JSON).exists():
        raise GateError(f"Locust ended (exit {done.returncode}) without a verdict: see {out / 'locust.log'}")
    view = RunView(target.label, out, read_records(out), json.loads((out / VERDICT_JSON).read_text()))
    return RunResult(done.returncode, view)


def restore_engines(layout: Layout, plan: Plan, echo=print) -> None:
    """Start again any engine a scenario stopped, and wait until it is healthy."""
    for engine in plan.engines:
        if local.restart_engine_if_stopped(layout, plan, engine.name):
            echo(f"engine {engine.name} started again and healthy")


def side_gateways(layout: Layout, plan: Plan) -> dict[str, tuple[subprocess.Popen, str]]:
    """Two LiteLLM processes beside the stack's own, started the same way, one with
    the tenant-policy plugin and one without: the side-by-side compares these two
    (the stack's own gateway, run by supervisord, measured faster than any
    process started beside it, which would flatter whichever ran there)."""
    started: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for offset, (name, plugin) in enumerate((("policy", True), ("plain", False))):
            port = layout.port_base + SIDE_GATEWAY_OFFSET + offset
            if local.port_open(port):
                raise GateError(f"port {port} (a gateway of --side-by-side) is in use; free it or use --port-base")
            process = local.start_side_gateway(layout, layout.ports(plan), f"gateway-{name}", port, plugin=plugin)
            started[name] = (process, f"http://{HOST}:{port}")
        for name, (process, url) in started.items():
            local.wait_side_gateway(layout, f"gateway-{name}", url, process)
    except (GateError, local.LocalStackError):
        for process, _ in started.values():
            local.stop_side_gateway(process)
        raise
    return started


def default_out(stack: str, scenario: str) -> Path:
    return Layout.from_environment().root / "gate" / f"{stack}-{scenario}-{time.strftime('%Y%m%d-%H%M%S')}"


def print_verdict(view: RunView, console) -> None:
    from rich.table import Table

    v = view.verdict
    table = Table(title=f"{view.label}: scenario {v['scenario']} — {'PASS' if v['passed'] else 'FAIL'}",
                  title_justify="left")
    for column in ("tenant", "tier", "sent", "ok", "429 quota/shed", "errors / SLO", "TTFT p95 ms / SLO",
                   "ITL p95 ms / SLO", "goodput req/s", "verdict"):
        table.add_column(column, justify="left" if column in ("tenant", "tier", "verdict") else "right")

    def ms(value):
        return "—" if value is None else f"{value * 1000:,.0f}"

    for f in v["tenants"].values():
        verdict = "not judged" if f["passed"] is None else ("[green]PASS[/]" if f["passed"] else "[red]FAIL[/]")
        if f["reasons"]:
            verdict += ": " + "; ".join(f["reasons"])
        table.add_row(f["tenant"], f["tier"], str(f["requests"]), str(f["succeeded"]),
                      f"{f['quota_429']}/{f['shed_429']}", f"{f['error_rate']:.1%} / {f['slo_max_error_rate']:.1%}",
                      f"{ms(f['ttft_p95'])} / {ms(f['slo_ttft_p95'])}", f"{ms(f['itl_p95'])} / {ms(f['slo_itl_p95'])}",
                      f"{f['goodput']:.2f}", verdict)
    console.print(table)
    for check in v["checks"]:
        mark = "[green]PASS[/]" if check["passed"] else "[red]FAIL[/]"
        console.print(f"  check {check['name']}: {mark} — {check['detail']}", soft_wrap=True, highlight=False)


def print_comparison(on: RunView, off: RunView, console) -> None:
    for stage, name, _tier, a, b in ttft_comparison(on.verdict, off.verdict):
        if a and b:
            console.print(f"  {stage:<10} {name:<12} TTFT p95 {a * 1000:8,.0f} ms with the policy, "
                          f"{b * 1000:8,.0f} ms without: {a / b:.2f}x", highlight=False)


def gate(stack: str, scenario_name: str, *, gateway: str | None, keys: str | None, out: str | None,
         short: bool, tenant: str | None, side_by_side: bool, stop_engine: str | None, layout: Layout,
         console) -> int:
    from tenantry.gate.scenarios import ScenarioError
    from tenantry.gate.scenarios import scenario as build_scenario
    from tenantry.stacks import plan_stack, require_fit, stack_path

    stack_file = stack_path(stack)
    plan = require_fit(plan_stack(stack_file))
    try:
        scenario = build_scenario(scenario_name, plan, short=short, tenant=tenant)
    except ScenarioError as error:
        raise GateError(str(error)) from None
    if gateway or keys:
        if not (gateway and keys):
            raise GateError("--gateway and --keys go together: the gateway's URL and a JSON file of tenant keys")
        if side_by_side:
            raise GateError("--side-by-side runs against the local stack only (it starts a plain LiteLLM beside it)")
        target = remote_target(gateway, Path(keys), plan, stop_engine)
    else:
        target = local_target(plan, stack_file, layout)
    directory = Path(out) if out else default_out(plan.stack, scenario.name)
    if scenario.name == "engine-failure" and not target.stop_engine_command:
        console.print("[yellow]no --stop-engine command: stop the engine yourself when the 'failed' stage "
                      "starts[/]")
    echo = console.print
    views: list[RunView] = []
    results: list[RunResult] = []
    lost: list[str] = []
    try:
        if not side_by_side:
            results.append(run_locust(plan, stack_file, scenario, target, directory, short, tenant, echo))
        else:
            gateways = side_gateways(layout, plan)
            try:
                for name, label in (("policy", "tenantry policy"), ("plain", "plain LiteLLM (no policy, FCFS)")):
                    if results:
                        restore_engines(layout, plan, echo)  # a scenario may have stopped one
                    side = Target(label, [gateways[name][1]], target.keys_file, target.stop_engine_command)
                    results.append(run_locust(plan, stack_file, scenario, side, directory / f"policy-{'on' if name == 'policy' else 'off'}",
                                              short, tenant, echo))
                    if reason := local.side_gateway_lost(layout, f"gateway-{name}", gateways[name][0]):
                        lost.append(f"{label}: {reason}; its figures measure a lost gateway, not the {name} path")
            finally:
                for process, _ in gateways.values():
                    local.stop_side_gateway(process)
    finally:
        if gateway is None:
            restore_engines(layout, plan, echo)
    views = [r.view for r in results]
    for view in views:
        print_verdict(view, console)
    if len(views) == 2:
        print_comparison(*views, console)
    for line in lost:
        console.print(f"[red]{line}[/]", highlight=False, soft_wrap=True)
    notes = [f"stack {plan.stack} ({stack_file}), scenario {scenario.name}: {scenario.summary}.",
             f"{'short (CI) version, ' if short else ''}{scenario.seconds:.0f} s: "
             + ", ".join(f"{s.name} {s.seconds:.0f} s" for s in scenario.stages) + ".", *lost]
    report = write_report(directory / "report.html", f"tenantry gate: {plan.stack} / {scenario.name}", views, notes)
    console.print(f"report: {report}", highlight=False, soft_wrap=True)
    return EXIT_PASS if results[0].exit_code == 0 else EXIT_FAIL
