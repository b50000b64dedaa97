"""`tenantry local ACTION`: the stack on this machine, real vLLM (CPU), LiteLLM,
PostgreSQL, Redis and Prometheus on 127.0.0.1, run by supervisord.

Exit codes: 0 done (up: healthy; status: every process healthy; smoke: every
tenant answered or was shed by admission as its tier allows; drill: every
alert arrived and resolved); 1 a check found a problem (status: a process
unhealthy or nothing running; smoke: a tenant failed; drill: an alert did not
arrive or did not resolve); 2 the spec is invalid; 3 the plan does not fit; 4 the stack could not
do what was asked (a port in use, a process that did not become healthy, a
missing tool), with what to do.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.text import Text

from tenantry.cli.output import EXIT_INVALID_SPEC, add_command, print_error, print_spec_error, stdout_console
from tenantry.findings import PlanRefused, SpecError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_DOES_NOT_FIT, EXIT_STACK_ERROR = 0, 1, 3, 4
ACTIONS = ("up", "status", "smoke", "down", "logs", "budget", "drill")


def add_parser(commands: argparse._SubParsersAction) -> None:
    local = add_command(commands, "local", "run the stack on this machine: real vLLM (CPU), LiteLLM, PostgreSQL, "
                        "Redis and Prometheus on 127.0.0.1", __doc__, description=__doc__.split("\n\n")[0])
    local.set_defaults(run=run)
    actions = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start (or update) the local stack and wait until it is healthy")
    up.add_argument("stack", nargs="?", default="local", metavar="STACK", help="stack name or file (default: local)")
    up.add_argument("--log-requests", action="store_true",
                    help="engines log each request as they received it (priority, cache_salt): for debugging")
    actions.add_parser("status", help="each process: state, pid, port, health")
    actions.add_parser("smoke", help="one request per tenant through the gateway, with its key")
    down = actions.add_parser("down", help="stop what `up` started; keep data unless --purge")
    down.add_argument("--purge", action="store_true", help="also delete the stack's data (not the model cache)")
    log = actions.add_parser("logs", help="the last lines of one process's log")
    log.add_argument("name", metavar="NAME", help="gateway-<n>, engine-<name>, postgres, redis, prometheus, supervisord")
    log.add_argument("-n", "--lines", type=int, default=50)
    budget = actions.add_parser("budget", help="cap a tenant's budget a few requests above its spend, or restore "
                                "the Plan's (the gate's exhaust-budget fault)")
    budget.add_argument("tenant", metavar="TENANT")
    budget.add_argument("--restore", action="store_true", help="set the Plan's budget back")
    drill = actions.add_parser("drill", help="stop an engine, PostgreSQL or Redis, wait for the alerts on-call would "
                               "get at the local receiver, start it again and wait for them to resolve")
    drill.add_argument("faults", nargs="+", metavar="FAULT", choices=("engine-down", "postgres-down", "redis-down"),
                       help="engine-down, postgres-down or redis-down; several run together")
    drill.add_argument("--engine", metavar="ENGINE", help="the engine engine-down stops (default: the stack's last)")
    for action in ACTIONS:
        actions.choices[action].add_argument(
            "--dir", metavar="DIR", help="state directory (default .local, or TENANTRY_LOCAL_DIR)")
        actions.choices[action].add_argument(
            "--port-base", type=int, metavar="PORT", help="first port (default 18100, or TENANTRY_LOCAL_PORT_BASE)")


def run(args: argparse.Namespace) -> int:
    from tenantry.local.health import LocalStackError
    from tenantry.local.layout import Layout

    layout = Layout.from_environment(args.dir, args.port_base)
    console = stdout_console()
    try:
        return _ACTIONS[args.local_command](args, layout, console)
    except SpecError as error:
        print_spec_error(error)
        return EXIT_INVALID_SPEC
    except PlanRefused as error:
        print_error(str(error))
        return EXIT_DOES_NOT_FIT
    except LocalStackError as error:
        print_error(str(error))
        return EXIT_STACK_ERROR


def _up(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local import stack as local

    result = local.up(args.stack, layout, progress=lambda line: console.print(Text(line), soft_wrap=True),
                      log_requests=args.log_requests)
    console.print(Text(f"local stack {result.plan.stack} is up in {result.seconds:.0f} s", style="bold green"))
    console.print(f"gateway: {result.gateway_url}/v1   (keys in {layout.keys_file}, mode 0600)")
    for tenant in result.plan.tenants:
        model = tenant.traffic[0].target
        console.print(f"  {tenant.name:<12} {tenant.tier:<12} models: {', '.join(tenant.models + tenant.adapters)}")
        console.print(Text(
            f"    curl -s {result.gateway_url}/v1/chat/completions -H 'Authorization: Bearer {result.keys[tenant.name]}' "
            f"-H 'Content-Type: application/json' -d '{{\"model\": \"{model}\", \"messages\": "
            f"[{{\"role\": \"user\", \"content\": \"hello\"}}], \"max_tokens\": 16}}'", style="dim"), soft_wrap=True)
    return EXIT_OK


def _status(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local import stack as local

    rows = local.status(layout)
    if not rows:
        console.print(f"nothing running from {layout.root}")
        return EXIT_CHECK_FAILED
    for row in rows:
        health = Text("healthy", style="green") if row.healthy else Text("unhealthy", style="red")
        console.print(Text(f"{row.name:<22} {row.state:<10} pid {row.pid or '-':<8} port {row.port or '-':<6} ")
                      + health)
    return EXIT_OK if all(r.healthy for r in rows) else EXIT_CHECK_FAILED


def _smoke(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local.smoke import smoke

    results = smoke(layout)
    for r in results:
        if r.served:
            mark, note = Text("✓ ", style="green"), ""
        elif r.ok:
            mark, note = Text("~ ", style="yellow"), f"shed by admission ({r.shed}), not a fault: "
        else:
            mark, note = Text("✗ ", style="red"), ""
        console.print(mark + Text(f"{r.tenant:<12} {r.tier:<12} {r.model:<16} HTTP {r.status}  "
                                  f"{r.seconds:5.2f} s  {note}{r.detail}"), soft_wrap=True)
    return EXIT_OK if all(r.ok for r in results) else EXIT_CHECK_FAILED


def _down(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local import stack as local
    from tenantry.local.layout import State

    if State.load(layout) is None and not args.purge:
        console.print(f"nothing was started from {layout.root}")
    local.down(layout, purge=args.purge, progress=console.print)
    return EXIT_OK


def _logs(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local import stack as local

    print(local.logs(layout, args.name, args.lines))
    return EXIT_OK


def _budget(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local.budget import change_budget

    changed = change_budget(layout, args.tenant, restore=args.restore)
    verb = "restored to" if args.restore else "capped at"
    console.print(f"{changed.tenant}: budget {verb} ${changed.max_budget_usd:.8f} (spent ${changed.spent_usd:.8f}) "
                  f"on {changed.replicas} gateway replica(s)")
    return EXIT_OK


def _drill(args: argparse.Namespace, layout, console: Console) -> int:
    from tenantry.local.drills import run_drills

    results = run_drills(layout, list(dict.fromkeys(args.faults)), args.engine, progress=console.print)
    for result in results:
        for a in result.arrivals:
            fired = f"fired after {a.fired_after:.0f} s (for {a.waited_for})" if a.fired_after is not None \
                else "never fired"
            resolved = f"resolved {a.resolved_after:.0f} s after {result.part} was back" \
                if a.resolved_after is not None else "never resolved"
            mark = Text("✓ ", style="green") if a.fired_after is not None and a.resolved_after is not None \
                else Text("✗ ", style="red")
            console.print(mark + Text(f"{result.fault:<14} {a.alert:<24} {a.receiver or '-':<8} {fired}; {resolved}"),
                          soft_wrap=True)
    return EXIT_OK if all(r.ok for r in results) else EXIT_CHECK_FAILED


_ACTIONS = {"up": _up, "status": _status, "smoke": _smoke, "down": _down, "logs": _logs, "budget": _budget,
            "drill": _drill}
