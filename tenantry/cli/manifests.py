"""`tenantry manifests STACK --out DIR`: the Kubernetes objects `pulumi up` would apply, checked.

Runs the Pulumi program offline (mock runtime), validates every object
against the stack's Kubernetes version and tenantry's policies, checks the
connectivity table (every flow the platform needs passes, every flow it must
never allow is denied) with network-config-analyzer against the rendered
NetworkPolicies, prints the table, and writes one YAML file per object
(secrets redacted), for review or GitOps.

Exit codes: 0 every object is valid; 1 validation or a policy fails, or the
plan does not fit; 2 the spec is invalid.
"""

from __future__ import annotations

import argparse

from rich.text import Text

from tenantry.cli.output import add_command, fitting_plan, stdout_console

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

    stack_plan = fitting_plan(args.stack)
    if isinstance(stack_plan, int):
        return stack_plan
    console = stdout_console()
    rendering = render(stack_path(args.stack), stack_plan.stack)
    written = write(rendering, args.out)
    problems = check_rendering(rendering, stack_plan)
    console.print(f"{len(written)} files in {args.out}: {len(rendering.manifests())} Kubernetes objects, "
                  f"{len(rendering.releases())} Helm releases (secrets redacted)")
    problems += _connectivity(stack_plan, rendering.manifests(), console)
    if problems:
        console.print(Text(f"{len(problems)} problem(s):", style="bold red"))
        for problem in problems:
            console.print(Text(f"  ✗ {problem}"), soft_wrap=True)
        return EXIT_PROBLEMS
    console.print(Text("valid", style="bold green") + Text(
        f": every object against Kubernetes {stack_plan.kubernetes_version} (strict), tenantry's policies and the "
        f"connectivity table"))
    return EXIT_VALID


def _connectivity(plan, manifests, console) -> list[str]:
    """The connectivity table as the analyser decided it, printed; its failures as problems."""
    from tenantry.manifests.connectivity import AnalyserMissing, analyse, problems

    try:
        verdicts = analyse(plan, manifests)
    except AnalyserMissing as missing:
        return [f"connectivity not checked: {missing}"]
    console.print(f"connectivity, decided by network-config-analyzer against the rendered NetworkPolicies "
                  f"({len(verdicts)} flows):")
    for v in verdicts:
        mark = Text("✓", style="green") if v.holds else Text("✗", style="bold red")
        console.print(Text("  ") + mark + Text(f" {'pass' if v.flow.must_pass else 'deny'}  {v.flow.name}: "
                                               f"{v.flow.why}"), soft_wrap=True)
    return problems(verdicts)
