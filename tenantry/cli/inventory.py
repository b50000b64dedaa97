"""`tenantry inventory STACK --out DIR`: the Ansible inventory of the stack's GPU hosts, from its Plan.

Writes DIR/hosts.yml (one group per node pool under gpu_pools, which
ansible/site.yml runs against), DIR/group_vars/gpu_pools.yml (the networks
administrators connect from, --admin-cidr, which the host firewall admits to
SSH) and DIR/group_vars/<group>.yml (the pool, its GPU, its MIG
configuration, and the node labels and taint), then:

    ansible-playbook -i DIR ansible/site.yml

Exit codes: 0 written; 1 the plan does not fit, or the stack has no GPU pool;
2 the spec or an --admin-cidr is invalid.
"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

from tenantry.cli.output import add_command, fitting_plan, print_error, stdout_console

EXIT_WRITTEN, EXIT_PROBLEMS, EXIT_INVALID = 0, 1, 2


def add_parser(commands: argparse._SubParsersAction) -> None:
    inventory = add_command(commands, "inventory", "write the Ansible inventory of the stack's GPU hosts", __doc__)
    inventory.add_argument("stack", metavar="STACK", help="a stack file or a stack name")
    inventory.add_argument("--out", required=True, metavar="DIR", help="directory for hosts.yml and group_vars/")
    inventory.add_argument("--admin-cidr", action="append", default=[], metavar="CIDR", dest="admin_cidrs",
                           help="a network administrators and Ansible's controller connect from (SSH); repeat for "
                                "more. Without one, the firewall role refuses to run until group_vars sets it")
    inventory.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tenantry.configs.ansible_inventory import gpu_pools, inventory

    admin_cidrs = []
    for text in args.admin_cidrs:
        try:
            admin_cidrs.append(str(ipaddress.ip_network(text)))
        except ValueError as error:
            print_error(f"--admin-cidr {text}: {error} (a network, such as 192.0.2.0/24 or 2001:db8::/64)")
            return EXIT_INVALID
    stack_plan = fitting_plan(args.stack)
    if isinstance(stack_plan, int):
        return stack_plan
    if not gpu_pools(stack_plan):
        print_error(f"stack {stack_plan.stack} has no GPU pool: nothing for Ansible to prepare")
        return EXIT_PROBLEMS
    out = Path(args.out)
    for file in inventory(stack_plan, tuple(admin_cidrs)):
        target = out / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.text)
    stdout_console().print(f"inventory of {len(gpu_pools(stack_plan))} GPU pool(s) in {out}: "
                           f"ansible-playbook -i {out} ansible/site.yml")
    return EXIT_WRITTEN
