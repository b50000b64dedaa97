"""`tenantry gate STACK --scenario NAME`: a mixed-tenant load scenario, every tenant judged against its SLO.

Runs one Locust scenario headless against the local stack (default) or a
gateway, prints each tenant's figures against its SLO, and writes an HTML
report with the CSVs.

Exit codes: 0 every judged tenant and every scenario check passes; 1 one
fails; 2 the gate cannot run as asked (invalid spec, plan that does not fit,
no stack or gateway to run against, unknown scenario or tenant).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tenantry.cli.output import EXIT_INVALID_SPEC, add_command, print_error, print_spec_error, stdout_console
from tenantry.findings import PlanRefused, SpecError
from tenantry.gate.scenario_model import FAULTS, RESTORES
from tenantry.gate.scenarios import SCENARIOS

if TYPE_CHECKING:
    from tenantry.gate.run import Prepared
    from tenantry.gate.target import Target

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2

_FAULT_KINDS = (*FAULTS, *RESTORES.values())


def add_parser(commands: argparse._SubParsersAction) -> None:
    gate = add_command(commands, "gate", "run a mixed-tenant load scenario and judge every tenant against its SLO",
                       __doc__)
    gate.add_argument("stack", metavar="STACK", help="a stack file or a stack name")
    gate.add_argument("--scenario", required=True, metavar="NAME", choices=list(SCENARIOS),
                      help=", ".join(SCENARIOS))
    gate.add_argument("--gateway", metavar="URL", help="a gateway to test instead of the local stack")
    gate.add_argument("--keys", metavar="FILE", help="with --gateway: JSON object of tenant name to key")
    gate.add_argument("--stop-engine", metavar="COMMAND",
                      help="with --gateway: command that stops an engine ({engine} is replaced), for engine-failure")
    gate.add_argument("--fault", action="append", default=[], metavar="KIND=COMMAND",
                      help="with --gateway: the shell command that does a fault or undoes one "
                           f"({', '.join(_FAULT_KINDS)}; "
                           "{engine}, {replica} and {tenant} are filled in); repeat for each")
    gate.add_argument("--database-url", metavar="URL",
                      help="with --gateway: LiteLLM's PostgreSQL, to reconcile each tenant's spend with what it was "
                           "served (the local stack's is known; without it a remote run's spend is not reconciled)")
    gate.add_argument("--tenant", metavar="NAME", help="the tenant a scenario pushes (default: the first of the tier)")
    gate.add_argument("--short", action="store_true", help="the CI version: every scenario in two minutes or less")
    gate.add_argument("--latency", choices=("judged", "reported"), default="judged",
                      help="judged: each tenant's latency against its SLO decides the verdict (default); reported: "
                      "shown beside the SLO, judged only as a ratio within the run (the tests' choice on a shared "
                      "machine)")
    gate.add_argument("--side-by-side", action="store_true",
                      help="local stack only: run again through plain LiteLLM (no policy, first come first served) "
                      "and compare")
    gate.add_argument("--repeat-prompts", action="store_true",
                      help="send the prompts every earlier run sent (cache-warm) instead of the run's own (cold)")
    gate.add_argument("--out", metavar="DIR", help="directory for the report and CSVs (default .local/gate/...)")
    gate.add_argument("--dir", metavar="DIR", help="the local stack's state directory (default .local)")
    gate.add_argument("--port-base", type=int, metavar="PORT", help="the local stack's first port")
    gate.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tenantry.gate.run import gate, prepare
    from tenantry.gate.target import GateError
    from tenantry.local.health import LocalStackError

    try:
        prepared = prepare(args.stack, args.scenario, short=args.short, tenant=args.tenant,
                           repeat_prompts=args.repeat_prompts, latency_judged=args.latency == "judged")
        out = _out(args, prepared)
        passed = gate(prepared, _targets(args, prepared), out=out, short=args.short, tenant=args.tenant,
                      console=stdout_console())
    except SpecError as error:
        print_spec_error(error)
        return EXIT_INVALID_SPEC
    except (GateError, LocalStackError, PlanRefused) as error:
        print_error(str(error))
        return EXIT_CANNOT_RUN
    return EXIT_PASS if passed else EXIT_FAIL


def _targets(args: argparse.Namespace, prepared: Prepared) -> list[Target]:
    """What the arguments point the gate at: a gateway, the local stack, or two gateways beside it."""
    from tenantry.gate.target import GateError, remote_target
    from tenantry.local.layout import Layout
    from tenantry.local.target import local_target, side_by_side_targets

    if args.gateway or args.keys:
        if not (args.gateway and args.keys):
            raise GateError("--gateway and --keys go together: the gateway's URL and a JSON file of tenant keys")
        if args.side_by_side:
            raise GateError("--side-by-side runs against the local stack only (it starts a plain LiteLLM beside it)")
        return [remote_target(args.gateway, Path(args.keys), prepared.plan, _fault_commands(args), args.database_url)]
    layout = Layout.from_environment(args.dir, args.port_base)
    if args.side_by_side:
        return side_by_side_targets(layout, prepared.plan, prepared.stack_file)
    return [local_target(layout, prepared.plan, prepared.stack_file)]


def _fault_commands(args: argparse.Namespace) -> dict[str, str]:
    from tenantry.gate.target import GateError

    commands = {"stop-engine": args.stop_engine} if args.stop_engine else {}
    for given in args.fault:
        kind, _, command = given.partition("=")
        if kind not in _FAULT_KINDS or not command.strip():
            raise GateError(f"--fault {given}: give KIND=COMMAND, KIND one of {', '.join(_FAULT_KINDS)}")
        commands[kind] = command
    return commands


def _out(args: argparse.Namespace, prepared: Prepared) -> Path:
    from tenantry.gate.run import default_out
    from tenantry.local.layout import Layout

    if args.out:
        return Path(args.out)
    return default_out(Layout.from_environment().root / "gate", prepared.plan.stack, prepared.scenario.name)
