"""What every command prints the same way: consoles and spec errors."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from tenantry.findings import SpecError

if TYPE_CHECKING:
    from tenantry.plan import Plan

EXIT_INVALID_SPEC = 2
"""Every command that reads a spec exits 2 when it is invalid."""


def add_command(commands: argparse._SubParsersAction, name: str, help: str, doc: str,
                description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose --help comes from its module's docstring: the paragraph after the
    title describes it (unless `description` is given) and the last one, its exit codes, closes it."""
    paragraphs = doc.strip().split("\n\n")
    return commands.add_parser(name, help=help, description=description or paragraphs[min(1, len(paragraphs) - 1)],
                               epilog=paragraphs[-1], formatter_class=argparse.RawDescriptionHelpFormatter)


def stdout_console() -> Console:
    # Piped output (CI logs, files) gets a wide page instead of rich's 80 columns.
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=140)


def print_error(message: str) -> None:
    """A user error on stderr, one line or a few, never a traceback."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(Text(message, style="red"))


def print_spec_error(error: SpecError, as_json: bool = False) -> None:
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


EXIT_DOES_NOT_FIT = 1
"""Commands that need a plan that fits exit 1 when it does not."""


def fitting_plan(stack: str) -> Plan | int:
    """The stack's plan, for commands that render from it; or, with the reasons printed, the exit code:
    EXIT_INVALID_SPEC for an invalid spec, EXIT_DOES_NOT_FIT for a plan that does not fit."""
    from tenantry.stacks import plan_stack

    try:
        stack_plan = plan_stack(stack)
    except SpecError as error:
        print_spec_error(error)
        return EXIT_INVALID_SPEC
    if not stack_plan.fits:
        from tenantry.cli.plan_report import print_verdict

        print_verdict(stack_plan, stdout_console())
        return EXIT_DOES_NOT_FIT
    return stack_plan
