"""`tenantry manifests STACK --out DIR`: the Kubernetes objects `pulumi up` would apply, checked.

Runs the Pulumi program offline (mock runtime), validates every object
against the stack's Kubernetes version and tenantry's policies, and writes one
YAML file per object (secrets redacted), for review or GitOps.

Exit codes: 0 every object is valid; 1 validation or a policy fails, or the
plan does not fit; 2 the spec is invalid.
"""

from __future__ import annotations

import argparse

from rich.text import Text

from tenantry.cli.output import EXIT_INVALID_SPEC, add_command, print_spec_error, stdout_console
from tenantry.findings import SpecError
from tenantry.stacks import plan_stack

EXIT_VALID, EXIT_PROBLEMS = 0, 1


def add_parser(commands: argparse._SubParsersAction) -> None:
    manifests = add_command(
        commands, "manifests", "write the Kubernetes manifests `pulumi up` would apply, validated, for review or GitOps",
        __doc__)
    manifests.add_argument("stack", metavar="STACK", help="a stack file or a stack name")
    manifests.add_argument("--out", required=True, metavar="DIR", help="directory for the manifests")
    manifests.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tenantry.manifests.checks import check_rendering
    from tenantry.manifests.offline import render, write
    from tenantry.stacks import stack_path

    try:
        stack_plan = plan_stack(args.stack)
    except SpecError as error:
        print_spec_error(error)
        return EXIT_INVALID_SPEC
    console = stdout_console()
    if not stack_plan.fits:
        from tenantry.cli.plan_report import print_verdict

        print_verdict(stack_plan, console)
        return EXIT_PROBLEMS
    rendering = render(stack_path(args.stack), stack_plan.stack)
    written = write(rendering, args.out)
    problems = check_rendering(rendering, stack_plan)
    console.print(f"{len(written)} files in {args.out}: {len(rendering.manifests())} Kubernetes objects, "
                  f"{len(rendering.releases())} Helm releases (secrets redacted)")
    if problems:
        console.print(Text(f"{len(problems)} problem(s):", style="bold red"))
        for problem in problems:
            console.print(Text(f"  ✗ {problem}"), soft_wrap=True)
        return EXIT_PROBLEMS
    console.print(Text("valid", style="bold green") + Text(
        f": every object against Kubernetes {stack_plan.kubernetes_version} (strict), and tenantry's policies"))
    return EXIT_VALID
