"""The `tenantry` command.

Exit codes: 0 the plan fits, 1 it does not (every reason listed), 2 the spec
is invalid (every problem listed, with its field path and line).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from tenantry.findings import SpecError
from tenantry.stacks import plan_stack

EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_INVALID_SPEC = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tenantry", description="Many LLM tenants on one shared GPU pool.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan = commands.add_parser(
        "plan", help="check that a stack's tenants fit its GPUs and show every number the platform will use",
        description="Plan a stack. Exit 0 when it fits, 1 when it does not, 2 for an invalid spec.",
    )
    plan.add_argument("stack", metavar="STACK", help="a stack file (stacks/local.yaml) or a stack name (local)")
    plan.add_argument("--json", action="store_true", help="print the whole Plan as JSON (keys in the README)")

    render = commands.add_parser(
        "render", help="write the Kubernetes manifests `pulumi up` would apply, for review or GitOps",
        description="Run the Pulumi program offline (mock runtime), validate every object against the stack's "
        "Kubernetes version and tenantry's policies, and write one YAML file per object (secrets redacted). "
        "Exit 0 when all is valid, 1 when validation or a policy fails or the plan does not fit, 2 for an "
        "invalid spec.",
    )
    render.add_argument("stack", metavar="STACK", help="a stack file or a stack name")
    render.add_argument("--out", required=True, metavar="DIR", help="directory for the manifests")

    gate = commands.add_parser(
        "gate", help="run a mixed-tenant load scenario and judge every tenant against its SLO",
        description="Run one Locust scenario headless against the local stack (default) or a gateway, print each "
        "tenant's figures against its SLO, and write an HTML report with the CSVs. Exit 0 when every judged tenant "
        "and every scenario check passes, 1 when one fails, 2 when the gate cannot run as asked.",
    )
    gate.add_argument("stack", metavar="STACK", help="a stack file or a stack name")
    gate.add_argument("--scenario", required=True, metavar="NAME",
                      help="steady, noisy-neighbour, over-quota, priority-ordering, engine-failure, cache-isolation "
                      "or ramp")
    gate.add_argument("--gateway", metavar="URL", help="a gateway to test instead of the local stack")
    gate.add_argument("--keys", metavar="FILE", help="with --gateway: JSON object of tenant name to key")
    gate.add_argument("--stop-engine", metavar="COMMAND",
                      help="with --gateway: command that stops an engine ({engine} is replaced), for engine-failure")
    gate.add_argument("--tenant", metavar="NAME", help="the tenant a scenario pushes (default: the first of the tier)")
    gate.add_argument("--short", action="store_true", help="the CI version: every scenario in two minutes or less")
    gate.add_argument("--side-by-side", action="store_true",
                      help="local stack only: run again through plain LiteLLM (no policy, first come first served) "
                      "and compare")
    gate.add_argument("--out", metavar="DIR", help="directory for the report and CSVs (default .local/gate/...)")
    gate.add_argument("--dir", metavar="DIR", help="the local stack's state directory (default .local)")
    gate.add_argument("--port-base", type=int, metavar="PORT", help="the local stack's first port")

    local = commands.add_parser("local", help="run the stack on this machine: real vLLM (CPU), LiteLLM, "
                                "PostgreSQL, Redis and Prometheus on 127.0.0.1")
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = local_commands.add_parser("up", help="start (or update) the local stack and wait until it is healthy")
    up.add_argument("stack", nargs="?", default="local", metavar="STACK", help="stack name or file (default: local)")
    up.add_argument("--log-requests", action="store_true",
                    help="engines log each request as they received it (priority, cache_salt): for debugging")
    local_commands.add_parser("status", help="each process: state, pid, port, health")
    local_commands.add_parser("smoke", help="one request per tenant through the gateway, with its key")
    down = local_commands.add_parser("down", help="stop what `up` started; keep data unless --purge")
    down.add_argument("--purge", action="store_true", help="also delete the stack's data (not the model cache)")
    log = local_commands.add_parser("logs", help="the last lines of one process's log")
    log.add_argument("name", metavar="NAME", help="gateway-<n>, engine-<name>, postgres, redis, prometheus, supervisord")
    log.add_argument("-n", "--lines", type=int, default=50)
    for command in (up, local_commands.choices["status"], local_commands.choices["smoke"], down, log):
        command.add_argument("--dir", metavar="DIR", help="state directory (default .local, or TENANTRY_LOCAL_DIR)")
        command.add_argument("--port-base", type=int, metavar="PORT",
                             help="first port (default 18100, or TENANTRY_LOCAL_PORT_BASE)")
    return parser


def _print_spec_error(error: SpecError, as_json: bool) -> None:
    if as_json:
        findings = [{"path": f.path, "message": f.message, "line": f.line} for f in error.findings]
        print(json.dumps({"valid": False, "source": error.source, "errors": findings}, indent=2))
        return
    console = Console(stderr=True, highlight=False, soft_wrap=True)  # one line per problem, greppable
    console.print(Text(error.headline, style="bold red"))
    for finding in error.findings:
        where = f"line {finding.line}: " if finding.line else ""
        console.print(
            Text("  ✗ ", style="red") + Text(where) + Text(finding.path or "(file)", style="bold")
            + Text(f": {finding.message}")
        )


def _stdout_console() -> Console:
    # Piped output (CI logs, files) gets a wide page instead of rich's 80 columns.
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=140)


def _run_plan(args: argparse.Namespace) -> int:
    try:
        stack_plan = plan_stack(args.stack)
    except SpecError as error:
        _print_spec_error(error, args.json)
        return EXIT_INVALID_SPEC
    if args.json:
        print(json.dumps(stack_plan.to_dict(), indent=2))
    else:
        from tenantry.cli.plan_report import print_plan

        print_plan(stack_plan, _stdout_console())
    return EXIT_FITS if stack_plan.fits else EXIT_DOES_NOT_FIT


def _run_render(args: argparse.Namespace) -> int:
    from tenantry.deploy.checks import check_rendering
    from tenantry.deploy.offline import render, write
    from tenantry.stacks import stack_path

    try:
        stack_plan = plan_stack(args.stack)
    except SpecError as error:
        _print_spec_error(error, as_json=False)
        return EXIT_INVALID_SPEC
    console = _stdout_console()
    if not stack_plan.fits:
        from tenantry.cli.plan_report import print_verdict

        print_verdict(stack_plan, console)
        return EXIT_DOES_NOT_FIT
    rendering = render(stack_path(args.stack), stack_plan.stack)
    written = write(rendering, args.out)
    problems = check_rendering(rendering, stack_plan)
    console.print(f"{len(written)} files in {args.out}: {len(rendering.manifests())} Kubernetes objects, "
                  f"{len(rendering.releases())} Helm releases (secrets redacted)")
    if problems:
        console.print(Text(f"{len(problems)} problem(s):", style="bold red"))
        for problem in problems:
            console.print(Text(f"  ✗ {problem}"), soft_wrap=True)
        return EXIT_DOES_NOT_FIT
    console.print(Text("valid", style="bold green") + Text(
        f": every object against Kubernetes {stack_plan.kubernetes_version} (strict), and tenantry's policies"))
    return EXIT_FITS


def _run_local(args: argparse.Namespace) -> int:
    from tenantry.findings import PlanRefused
    from tenantry.local import stack as local
    from tenantry.local.layout import Layout, State

    layout = Layout.from_environment(args.dir, args.port_base)
    console = _stdout_console()
    try:
        if args.local_command == "up":
            result = local.up(args.stack, layout, progress=lambda line: console.print(Text(line), soft_wrap=True),
                              log_requests=args.log_requests)
            _print_up(result, console)
        elif args.local_command == "status":
            rows = local.status(layout)
            if not rows:
                console.print(f"nothing running from {layout.root}")
                return 1
            for row in rows:
                health = Text("healthy", style="green") if row.healthy else Text("unhealthy", style="red")
                console.print(Text(f"{row.name:<22} {row.state:<10} pid {row.pid or '-':<8} port {row.port or '-':<6} ")
                              + health)
            return 0 if all(r.healthy for r in rows) else 1
        elif args.local_command == "smoke":
            results = local.smoke(layout)
            for r in results:
                if r.served:
                    mark, note = Text("✓ ", style="green"), ""
                elif r.ok:
                    mark, note = Text("~ ", style="yellow"), f"shed by admission ({r.shed}), not a fault: "
                else:
                    mark, note = Text("✗ ", style="red"), ""
                console.print(mark + Text(f"{r.tenant:<12} {r.tier:<12} {r.model:<16} HTTP {r.status}  "
                                          f"{r.seconds:5.2f} s  {note}{r.detail}"), soft_wrap=True)
            return 0 if all(r.ok for r in results) else 1
        elif args.local_command == "down":
            if State.load(layout) is None and not args.purge:
                console.print(f"nothing was started from {layout.root}")
            local.down(layout, purge=args.purge, progress=console.print)
        else:
            print(local.logs(layout, args.name, args.lines))
    except SpecError as error:
        _print_spec_error(error, as_json=False)
        return EXIT_INVALID_SPEC
    except (local.LocalStackError, PlanRefused) as error:
        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(str(error), style="red"))
        return EXIT_DOES_NOT_FIT
    return EXIT_FITS


def _print_up(result: object, console: Console) -> None:
    from tenantry.local.stack import UpResult

    assert isinstance(result, UpResult)
    console.print(Text(f"local stack {result.plan.stack} is up in {result.seconds:.0f} s", style="bold green"))
    console.print(f"gateway: {result.gateway_url}/v1   (keys in .local/keys.json, mode 0600)")
    for tenant in result.plan.tenants:
        model = tenant.traffic[0].target
        console.print(f"  {tenant.name:<12} {tenant.tier:<12} models: {', '.join(tenant.models + tenant.adapters)}")
        console.print(Text(
            f"    curl -s {result.gateway_url}/v1/chat/completions -H 'Authorization: Bearer {result.keys[tenant.name]}' "
            f"-H 'Content-Type: application/json' -d '{{\"model\": \"{model}\", \"messages\": "
            f"[{{\"role\": \"user\", \"content\": \"hello\"}}], \"max_tokens\": 16}}'", style="dim"), soft_wrap=True)


def _run_gate(args: argparse.Namespace) -> int:
    from loadtests.run import EXIT_USAGE, GateError, gate
    from tenantry.findings import PlanRefused
    from tenantry.local.layout import Layout
    from tenantry.local.stack import LocalStackError

    console = _stdout_console()
    try:
        return gate(args.stack, args.scenario, gateway=args.gateway, keys=args.keys, out=args.out, short=args.short,
                    tenant=args.tenant, side_by_side=args.side_by_side, stop_engine=args.stop_engine,
                    layout=Layout.from_environment(args.dir, args.port_base), console=console)
    except SpecError as error:
        _print_spec_error(error, as_json=False)
        return EXIT_INVALID_SPEC
    except (GateError, LocalStackError, PlanRefused) as error:
        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(str(error), style="red"))
        return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "gate":
        return _run_gate(args)
    if args.command == "render":
        return _run_render(args)
    if args.command == "local":
        return _run_local(args)
    return _run_plan(args)


if __name__ == "__main__":
    sys.exit(main())
