"""What only the node's own kernel shows, read live in a virtual machine booted from the hardened Debian tree with
Debian's kernel (tests/ansible/vm.py): the kernel parameters the roles write are in force after a boot (os-03), the
modules Kubernetes needs are loaded and the blocked ones refused (os-02, os-04), and the services a chroot or a
container cannot run (auditd, chrony: they need a kernel and a clock of their own) run. On the chroot and container
kinds these are waived (ansible/waivers.yml): both share the test machine's kernel.

The tree is Debian's, hardened as a node without GPUs (gpu_node refuses Debian, gpu-12): the GPU role's running
services are read in the Ubuntu container instead, and the headers of the running kernel (gpu-04) nowhere."""

from __future__ import annotations

import pytest

from tests.ansible import builds, node
from tests.ansible.controls import FACTS, KERNEL_FACTS

CASES = [pytest.param(fact.control, fact, id=f"vm-{fact.id}") for fact in (*FACTS, *KERNEL_FACTS)
         if fact.live and fact.control in node.controls_of(builds.VM_TREE)]


@pytest.fixture(scope="module")
def vm():
    """The VM once its boot has ended with every unit started: a unit that fails on the node's own kernel is a
    defect of the roles, whatever the facts say."""
    booted = builds.booted_vm()
    failed = booted.host.run("systemctl list-units --failed --plain --no-legend").stdout.strip()
    assert booted.boot_state == "running", f"systemd: {booted.boot_state}; failed: {failed}\n{booted.console[-3000:]}"
    return booted


@pytest.mark.parametrize(("control", "fact"), CASES)
def test_kernel_control(vm, control, fact):
    fact.check(vm.host)
