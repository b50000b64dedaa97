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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _run_plan(args)


if __name__ == "__main__":
    sys.exit(main())
