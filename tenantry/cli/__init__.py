"""The `tenantry` command: one module per subcommand, each with its own exit codes.

    plan.py        tenantry plan STACK         does it fit; every number the platform will use
    manifests.py   tenantry manifests STACK    the Kubernetes objects `pulumi up` would apply, checked
    gate.py        tenantry gate STACK         a load scenario, every tenant judged against its SLO
    local.py       tenantry local ACTION       the stack as processes on this machine
    showback.py    tenantry showback STACK     spend per tenant and engine, checked against the Plan's prices
    inventory.py   tenantry inventory STACK    the Ansible inventory of the stack's GPU hosts
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tenantry.cli import gate, inventory, local, manifests, plan, showback

COMMANDS = (plan, manifests, gate, local, showback, inventory)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tenantry", description="Many LLM tenants on one shared GPU pool.")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
