"""What only the node's own kernel shows, read live in a virtual machine booted from the hardened Debian tree with
Debian's kernel (tests/ansible/vm.py): the kernel parameters the roles write are in force after a boot (os-03), the
modules Kubernetes needs are loaded and the blocked ones refused (os-02, os-04), and the services a chroot or a
container cannot run (auditd, chrony: they need a kernel and a clock of their own) run. On the chroot and container
kinds these are waived (ansible/waivers.yml): both share the test machine's kernel.

The tree is Debian's, hardened as a node without GPUs (gpu_node refuses Debian, gpu-12): the GPU role's running
services are read in the Ubuntu container instead, and the headers of the running kernel (gpu-04) nowhere."""

from __future__ import annotations

import base64

import pytest

from tests.ansible import builds, node
from tests.ansible.controls import FACTS, KERNEL_FACTS, SYSCTL_FILE

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


RP_FILTER = ("net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter", "net.ipv4.conf.tenantry0.rp_filter")


def _rp_filter_with(vm, sysctl_file: str) -> dict[str, str]:
    """The VM's kernel after `sysctl --system` with this file in the role's place, as a boot applies it (after
    Debian's own sysctl.d files), read for `all`, `default` and a device created afterwards."""
    encoded = base64.b64encode(sysctl_file.encode()).decode()
    vm.host.check_output(f"echo {encoded} | base64 -d > {SYSCTL_FILE} && sysctl --system")
    vm.host.check_output("ip link add tenantry0 type dummy")
    try:
        return {key: vm.host.check_output(f"sysctl -n {key}") for key in RP_FILTER}
    finally:
        vm.host.run("ip link del tenantry0")


@pytest.mark.control("os-03")
def test_os_03_a_cilium_node_turns_reverse_path_filtering_off_for_the_devices_cilium_creates(vm):
    """rp_filter follows the CNI: strict (1) for Calico, whose Felix exits on loose, and off (0) for Cilium, whose
    datapath's packets fail a reverse-path check on the lxc and cilium_ devices it creates (the kernel takes the
    larger of `all` and the device's value). The role writes the Debian chroot's file for a Cilium profile (its
    sysctl tasks alone, live switches off there), and the VM's own kernel applies it as a boot would: `all` and a
    device created afterwards read 0; the file for Calico, which the VM booted with, gives 1 again."""
    chroot = builds.hardened(node.DEBIAN_CHROOT)
    calico = chroot.host.file(SYSCTL_FILE).content_string
    sysctl_tasks = ("--tags", "os_hardening_sysctl_enabled", *node.NODES[node.DEBIAN_CHROOT].playbook_args)
    try:
        written = node.playbook(chroot.inventory, *sysctl_tasks, extra_vars={"firewall_cni_profile": "cilium-vxlan"})
        assert written.returncode == 0, written.failures() or written.stderr[-2000:]
        cilium = chroot.host.file(SYSCTL_FILE).content_string
    finally:
        restored = node.playbook(chroot.inventory, *sysctl_tasks)
    assert restored.returncode == 0 and chroot.host.file(SYSCTL_FILE).content_string == calico, restored.failures()
    try:
        assert _rp_filter_with(vm, cilium) == dict.fromkeys(RP_FILTER, "0")
    finally:
        assert _rp_filter_with(vm, calico) == dict.fromkeys(RP_FILTER, "1")
