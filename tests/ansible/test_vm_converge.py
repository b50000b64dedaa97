"""site.yml as a site runs it, on a host with a kernel of its own: over SSH, every live switch on, into the hardened
Debian tree booted in the VM (tests/ansible/vm.py). The chroot and the container share the test machine's kernel, so
there the kernel parameters are never applied and os_hardening's services never restarted (waivers.yml); here they
are, and a second run with every handler live changes nothing.

The VM is put back to what a fresh host is first: br_netfilter not loaded (a host that wrote modules-load.d has not
booted since: its net.bridge.* parameters do not exist, and `sysctl --system` failed on them before the role loaded
the module itself) and a parameter changed by hand (kernel.kptr_restrict 0), which the run must put back.

The controller reaches the node through qemu's user network: the node's card is brought up here (the boot leaves it
down), connections arrive from qemu's host address, which the inventory admits as the site's admin network (and which
the booted firewall is told once, by hand, so the first run can log in), and the node has no way out: its package
lists are marked fresh so apt answers from what is installed."""

from __future__ import annotations

import os

import pytest

from tests.ansible import builds, node
from tests.ansible.controls import SYSCTLS

RUN_IT = "TENANTRY_VM_CONVERGE"
pytestmark = pytest.mark.skipif(
    os.environ.get(RUN_IT) != "1",
    reason=f"needs KVM to fit make test's time: under qemu's software emulation, beside the live tests, each run over "
           f"SSH took 11-13 minutes; {RUN_IT}=1 runs it "
           "(docs/decisions.md: What `make test` skips, and what would run it)")

QEMU_HOST, NODE_ADDRESS = "10.0.2.2", "10.0.2.15/24"
"""qemu's user network: where the test machine's connections come from, and the address the node takes."""
HAND_CHANGED = ("kernel.kptr_restrict", "0")
"""A parameter set by hand after the boot, away from the value the role keeps in force (controls.SYSCTLS)."""


@pytest.fixture(scope="module")
def ssh_vm():
    """The booted VM as a fresh host reached over SSH: its card up, br_netfilter unloaded, a parameter changed."""
    vm = builds.booted_vm()
    host = vm.host
    card = next(name for name in host.check_output("ls /sys/class/net").split() if name.startswith(("en", "eth")))
    host.check_output(f"ip address add {NODE_ADDRESS} dev {card} && ip link set {card} up")
    host.check_output(f"nft insert rule inet tenantry_host input ip saddr {QEMU_HOST} tcp dport 22 accept")
    host.check_output("mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/update-success-stamp")
    host.check_output("modprobe -r br_netfilter")
    assert not host.file("/sys/module/br_netfilter").exists, "br_netfilter is still loaded: no fresh host to start from"
    key, changed = HAND_CHANGED
    host.check_output(f"sysctl -w {key}={changed}")
    hardened = builds.hardened(node.DEBIAN_CHROOT)
    live = dict.fromkeys(node.TARGET_VARS["chroot"], True)
    # One SSH connection a run, not one a task: each key exchange costs the emulated node seconds, and one that took
    # more than ssh's 10 s left a second run unreachable (2026-12-08). The master ends 30 s after the run.
    reuse = (f"-o ControlMaster=auto -o ControlPersist=30s -o ControlPath={node.CACHE / 'ssh-%C'} "
             "-o ConnectTimeout=120")
    inventory = node.ssh_inventory(hardened.inventory, node.CACHE / "inventories" / f"{builds.VM}-ssh",
                                   node.DEBIAN_CHROOT, "127.0.0.1", port=vm.ssh_port,
                                   extra={**live, "firewall_admin_cidrs": [node.ADMIN_NETWORK, f"{QEMU_HOST}/32"],
                                          "ansible_ssh_args": reuse, "ansible_ssh_timeout": 120})
    return vm, inventory


@pytest.fixture(scope="module")
def runs(ssh_vm):
    """The first run over SSH, and the second once the first succeeded."""
    _, inventory = ssh_vm
    args = node.NODES[node.DEBIAN_CHROOT].playbook_args
    first = builds.timed(f"{builds.VM}: converge over SSH", lambda: node.playbook(inventory, *args))
    second = (builds.timed(f"{builds.VM}: second run over SSH", lambda: node.playbook(inventory, *args))
              if first.returncode == 0 else None)
    return first, second


@pytest.mark.control("os-02")
@pytest.mark.control("os-03")
def test_os_02_os_03_a_first_run_on_a_fresh_host_loads_br_netfilter_and_puts_every_parameter_in_force(ssh_vm, runs):
    vm, _ = ssh_vm
    first, _ = runs
    assert first.returncode == 0, first.failures() or first.stderr[-3000:]
    assert vm.host.file("/sys/module/br_netfilter").exists
    assert vm.host.check_output("sysctl -n net.bridge.bridge-nf-call-iptables") == "1"
    key, changed = HAND_CHANGED
    assert vm.host.check_output(f"sysctl -n {key}") == str(SYSCTLS[key]) != changed
    applied = [t for t in first.tasks if t.control == "os-03" and t.status == "changed"]
    assert applied, "the parameter changed by hand was not put back by the role's own task"


def test_a_second_run_with_every_handler_and_service_live_changes_nothing(runs):
    first, second = runs
    assert second is not None, f"no second run: the first failed ({first.failures()})"
    assert second.returncode == 0, second.failures() or second.stderr[-3000:]
    assert [t.name for t in second.tasks if t.status == "changed"] == []
