"""`tenantry inventory STACK --out DIR`: the Ansible inventory of the stack's GPU hosts, from its Plan.

Writes DIR/hosts.yml (one group per node pool under gpu_pools, which
ansible/site.yml runs against), DIR/group_vars/gpu_pools.yml (the site's
networks: --admin-cidr, where administrators connect from, which the host
firewall admits to SSH; --cni, the cluster's CNI profile, whose traffic between
nodes it admits; --pod-cidr, the pod networks, which may call the kubelet and
scrape the exporters) and DIR/group_vars/<group>.yml (the pool, its GPU, its MIG
configuration, and the taint and labels the kubelet registers), then:

    ansible-playbook -i DIR ansible/site.yml

Exit codes: 0 written; 1 the plan does not fit, or the stack has no GPU pool;
2 the spec, an --admin-cidr or a --pod-cidr is invalid.
"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

from tenantry.cli.output import add_command, fitting_plan, print_error, stdout_console
from tenantry.configs.ansible_inventory import CNI_PROFILES

EXIT_WRITTEN, EXIT_PROBLEMS, EXIT_INVALID = 0, 1, 2


def add_parser(commands: argparse._SubParsersAction) -> None:
    inventory = add_command(commands, "inventory", "write the Ansible inventory of the stack's GPU hosts", __doc__)
    inventory.add_argument("stack", metavar="STACK", help="a stack file or a stack name")
    inventory.add_argument("--out", required=True, metavar="DIR", help="directory for hosts.yml and group_vars/")
    inventory.add_argument("--admin-cidr", action="append", default=[], metavar="CIDR", dest="admin_cidrs",
                           help="a network administrators and Ansible's controller connect from (SSH); repeat for "
                                "more. Without one, the firewall role refuses to run until group_vars sets it")
    inventory.add_argument("--cni", choices=CNI_PROFILES, default="", metavar="PROFILE", dest="cni_profile",
                           help=f"the cluster's CNI and its mode: {', '.join(CNI_PROFILES)} (ansible/README.md). "
                                "Without one, the firewall role refuses to run until group_vars sets it")
    inventory.add_argument("--pod-cidr", action="append", default=[], metavar="CIDR", dest="pod_cidrs",
                           help="a pod network of the cluster (kubeadm's --pod-network-cidr, the CNI's IP pools); "
                                "repeat for more. Without one, the firewall role refuses to run")
    inventory.set_defaults(run=run)


def networks(flag: str, texts: list[str]) -> tuple[str, ...] | None:
    """The networks given with a flag, in their canonical form; None, with the error printed, for one that is not."""
    found = []
    for text in texts:
        try:
            found.append(str(ipaddress.ip_network(text)))
        except ValueError as error:
            print_error(f"{flag} {text}: {error} (a network, such as 192.0.2.0/24 or 2001:db8::/64)")
            return None
    return tuple(found)


def run(args: argparse.Namespace) -> int:
    from tenantry.configs.ansible_inventory import SiteNetworks, gpu_pools, inventory

    admin_cidrs, pod_cidrs = networks("--admin-cidr", args.admin_cidrs), networks("--pod-cidr", args.pod_cidrs)
    if admin_cidrs is None or pod_cidrs is None:
        return EXIT_INVALID
    stack_plan = fitting_plan(args.stack)
    if isinstance(stack_plan, int):
        return stack_plan
    if not gpu_pools(stack_plan):
        print_error(f"stack {stack_plan.stack} has no GPU pool: nothing for Ansible to prepare")
        return EXIT_PROBLEMS
    out = Path(args.out)
    for file in inventory(stack_plan, SiteNetworks(admin_cidrs=admin_cidrs, cni_profile=args.cni_profile,
                                                    pod_cidrs=pod_cidrs)):
        target = out / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.text)
    stdout_console().print(f"inventory of {len(gpu_pools(stack_plan))} GPU pool(s) in {out}: "
                           f"ansible-playbook -i {out} ansible/site.yml")
    return EXIT_WRITTEN
