"""What only the node's own kernel shows, read live in a virtual machine booted from the hardened Debian tree with
Debian's kernel (tests/ansible/vm.py): the kernel parameters the roles write are in force after a boot (os-03), the
modules Kubernetes needs are loaded and the blocked ones refused (os-02, os-04), and the services a chroot or a
container cannot run (auditd, chrony: they need a kernel and a clock of their own) run. On the chroot and container
kinds these are waived (ansible/waivers.yml): both share the test machine's kernel.

Not shown here: the headers of the running kernel (gpu-04), which the GPU role installs on a live run and the VM's
tree, hardened in a chroot, never had one; the kubelet's flags at work (gpu-08), no kubelet runs."""

from __future__ import annotations

import pytest

from tests.ansible import builds
from tests.ansible.controls import FACTS, KERNEL_FACTS

NOT_IN_THE_VM = {"gpu-04"}
CASES = [pytest.param(fact.control, fact, id=f"vm-{fact.id}") for fact in (*FACTS, *KERNEL_FACTS)
         if fact.live and fact.control not in NOT_IN_THE_VM]


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
