"""`tenantry plan STACK [--json]`: does the stack fit, and every number the platform will use.

Exit codes: 0 the plan fits; 1 it does not (every reason listed); 2 the spec
is invalid (every problem listed, with its field path and line).
"""

from __future__ import annotations

import argparse
import json

from tenantry.cli.output import EXIT_INVALID_SPEC, add_command, print_spec_error, stdout_console
from tenantry.findings import SpecError
from tenantry.stacks import plan_stack

EXIT_FITS, EXIT_DOES_NOT_FIT = 0, 1


def add_parser(commands: argparse._SubParsersAction) -> None:
    plan = add_command(commands, "plan",
                       "check that a stack's tenants fit its GPUs and show every number the platform will use",
                       __doc__, description="Plan a stack.")
    plan.add_argument("stack", metavar="STACK", help="a stack file (stacks/local.yaml) or a stack name (local)")
    plan.add_argument("--json", action="store_true", help="print the whole Plan as JSON (keys in docs/platform.md)")
    plan.add_argument("--all-tenants", action="store_true",
                      help="list every tenant in the tables (by default the first 100, with a summary by tier)")
    plan.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        stack_plan = plan_stack(args.stack)
    except SpecError as error:
        print_spec_error(error, args.json)
        return EXIT_INVALID_SPEC
    if args.json:
        print(json.dumps(stack_plan.to_dict(), indent=2))
    else:
        from tenantry.cli.plan_report import print_plan

        print_plan(stack_plan, stdout_console(), all_tenants=args.all_tenants)
    return EXIT_FITS if stack_plan.fits else EXIT_DOES_NOT_FIT
