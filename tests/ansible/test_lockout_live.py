"""The roles never lock their own operator out. A site's controller reaches the booted node over SSH from the admin
network (the peer namespace of tests/ansible/packets.py), as the admin with its key and sudo: the play runs there
and keeps its way in; rules that would not admit the controller's address, or an SSH group list without the play's
own login, are refused before anything changes; a firewall with no admin network is refused; and a new SSH port
moves sshd and the firewall together (one variable), so the admin reaches the new port and not the old one."""

from __future__ import annotations

import pytest

from tests.ansible import node
from tests.ansible.packets import ADMIN, NODE_ADDRESS, SSH_PORTS

MOVED_PORT = SSH_PORTS[1]


@pytest.fixture
def over_ssh(container_node):
    """The container's inventory, reached over SSH from the admin's address."""
    return node.ssh_inventory(container_node.inventory, node.CACHE / "inventories" / f"{container_node.key}-ssh",
                              container_node.key, NODE_ADDRESS, ADMIN)


def _refused(run: node.Run, task: str) -> str:
    failed = [t for t in run.tasks if t.status == "failed"]
    assert run.returncode != 0 and [t.name.split(" : ", 1)[-1] for t in failed] == [task], \
        run.failures() or run.stderr[-2000:]
    assert run.stats.get("changed") == 0, run.stats
    return failed[0].message


@pytest.mark.control("fw-01")
@pytest.mark.control("ssh-05")
def test_fw_01_ssh_05_a_play_over_ssh_from_the_admin_network_runs_and_keeps_its_way_in(over_ssh, link):
    run = node.playbook(over_ssh, "--tags", "ssh_hardening,firewall", netns=link.peer_namespace)
    assert run.returncode == 0, run.failures() or run.stderr[-3000:]
    assert [t.name for t in run.tasks if t.status == "changed"] == []
    assert link.accepts(ADMIN, "tcp", 22).banner.startswith("SSH-2.0-")


@pytest.mark.control("fw-01")
def test_fw_01_rules_that_would_not_admit_the_controller_are_refused(over_ssh, link):
    run = node.playbook(over_ssh, "--tags", "firewall", extra_vars={"firewall_admin_cidrs": ["10.0.0.0/8"]},
                        netns=link.peer_namespace)
    message = _refused(run, "Refuse rules that would cut this play's own connection")
    assert f"connects from {ADMIN}" in message and "10.0.0.0/8" in message, message
    assert link.accepts(ADMIN, "tcp", 22).outcome == "connected"


@pytest.mark.control("ssh-05")
def test_ssh_05_allowed_groups_without_the_plays_login_are_refused(over_ssh, link):
    run = node.playbook(over_ssh, "--tags", "ssh_hardening", extra_vars={"ssh_hardening_allow_groups": ["gpu-admins"]},
                        netns=link.peer_namespace)
    message = _refused(run, "Refuse to lock this play's own login out")
    assert f"logs in as {node.ADMIN}" in message and node.ADMIN_GROUP in message, message
    assert link.accepts(ADMIN, "tcp", 22).outcome == "connected"


@pytest.mark.control("fw-01")
def test_fw_01_a_firewall_without_an_admin_network_is_refused(container_node):
    run = node.playbook(container_node.inventory, "--tags", "firewall", extra_vars={"firewall_admin_cidrs": []})
    assert "tenantry inventory STACK --out DIR --admin-cidr CIDR" in _refused(
        run, "Refuse a firewall that admits SSH from nowhere")


@pytest.mark.control("fw-01")
@pytest.mark.parametrize("unknown", [{"firewall_cni_profile": "flannel"}, {"firewall_pod_cidrs": []}])
def test_fw_01_a_firewall_without_the_clusters_cni_or_pod_networks_is_refused(container_node, unknown):
    """Guessed, they would drop the pod network between nodes (another CNI's tunnel) or the pods that call the host."""
    message = _refused(node.playbook(container_node.inventory, "--tags", "firewall", extra_vars=unknown),
                       "Refuse a firewall that knows neither the cluster's CNI nor its pod networks")
    assert "must be one of calico-ipip, calico-vxlan, calico-bgp, cilium-vxlan" in message, message
    assert "--cni PROFILE --pod-cidr CIDR" in message, message


@pytest.mark.control("fw-01")
@pytest.mark.control("ssh-05")
def test_fw_01_ssh_05_a_new_ssh_port_moves_sshd_and_the_firewall_together(container_node, link):
    try:
        moved = node.playbook(container_node.inventory, "--tags", "ssh_hardening,firewall",
                              extra_vars={"ssh_hardening_port": MOVED_PORT})
        assert moved.returncode == 0, moved.failures() or moved.stderr[-3000:]
        assert link.accepts(ADMIN, "tcp", MOVED_PORT).banner.startswith("SSH-2.0-")
        link.drops(ADMIN, "tcp", 22)
    finally:
        back = node.playbook(container_node.inventory, "--tags", "ssh_hardening,firewall")
    assert back.returncode == 0, back.failures()
    assert link.accepts(ADMIN, "tcp", 22).banner.startswith("SSH-2.0-")
