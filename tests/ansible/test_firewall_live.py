"""The hardened firewall live on the booted Ubuntu node. Packets (fw-01): the node answers what its inventory lets
in and drops the rest, as its own drop counter counts; the rules' text is not read here, what a host's neighbours can
and cannot reach is (tests/ansible/packets.py). The service (fw-02, fw-04): reloading, restarting and stopping it
leave another agent's table (kube-proxy's, the CNI's) in place. NodePorts are closed before kube-proxy's rewrite
hands them to a pod (fw-01)."""

from __future__ import annotations

import pytest

from tests.ansible import node
from tests.ansible.packets import ADMIN, CLUSTER, POD, STRANGER

ACCEPTED = {  # (source, protocol, port): what answers, nothing listening but sshd. The node's CNI: calico-ipip.
    "ssh from the admin network": ((ADMIN, "tcp", 22), "connected"),
    "the kubelet from the cluster": ((CLUSTER, "tcp", 10250), "refused"),
    "the kubelet from a pod (metrics-server)": ((POD, "tcp", 10250), "refused"),
    "kube-proxy's health check from the cluster": ((CLUSTER, "tcp", 10256), "refused"),
    "node-exporter from the cluster": ((CLUSTER, "tcp", 9100), "refused"),
    "node-exporter from a pod (Prometheus)": ((POD, "tcp", 9100), "refused"),
    "dcgm-exporter from a pod (Prometheus)": ((POD, "tcp", 9400), "refused"),
    "Calico BGP from the cluster": ((CLUSTER, "tcp", 179), "refused"),
    "Calico Typha from the cluster": ((CLUSTER, "tcp", 5473), "refused"),
    "a NodePort from the cluster": ((CLUSTER, "tcp", 30080), "refused"),
}
DROPPED = {
    "ssh from a stranger": (STRANGER, "tcp", 22),
    "ssh from the cluster": (CLUSTER, "tcp", 22),
    "ssh from a pod": (POD, "tcp", 22),
    "the kubelet from the admin network": (ADMIN, "tcp", 10250),
    "the kubelet from a stranger": (STRANGER, "tcp", 10250),
    "an exporter from a stranger": (STRANGER, "tcp", 9100),
    "Calico BGP from a pod": (POD, "tcp", 179),
    "VXLAN, which calico-ipip does not use, from the cluster": (CLUSTER, "udp", 4789),
    "Cilium's VXLAN from the cluster": (CLUSTER, "udp", 8472),
    "a NodePort from a stranger": (STRANGER, "tcp", 30080),
    "a port nobody opened, from the cluster": (CLUSTER, "tcp", 8080),
}
CILIUM = {"firewall_cni_profile": "cilium-vxlan", "firewall_cni_wireguard": True}
CILIUM_ACCEPTED = {"VXLAN": ("udp", 8472), "health": ("tcp", 4240), "Hubble's peer service": ("tcp", 4244),
                   "WireGuard": ("udp", 51871), "kube-proxy's health check": ("tcp", 10256)}
CILIUM_DROPPED = {"Calico BGP": ("tcp", 179), "Calico Typha": ("tcp", 5473), "Calico's WireGuard": ("udp", 51820),
                  "Geneve, which cilium-vxlan does not use": ("udp", 6081)}


@pytest.mark.control("fw-01")
@pytest.mark.parametrize("case", ACCEPTED)
def test_fw_01_the_firewall_lets_in_what_the_inventory_allows(case, link):
    (source, proto, port), expected = ACCEPTED[case]
    answer = link.accepts(source, proto, port)
    assert answer.outcome == expected, f"{case}: {answer}"
    if port == 22:
        assert answer.banner.startswith("SSH-2.0-"), answer


@pytest.mark.control("fw-01")
@pytest.mark.parametrize("case", DROPPED)
def test_fw_01_the_firewall_drops_everything_else_and_counts_it(case, link):
    link.drops(*DROPPED[case])


@pytest.mark.control("fw-01")
def test_fw_01_a_nodeport_is_closed_to_strangers_before_kube_proxy_hands_it_to_its_pod(link):
    """kube-proxy rewrites a NodePort's packets to their pod's address in prerouting, so they are forwarded and never
    meet the input chain: with a stand-in of its rule sending the node's 30080 to a pod behind the node, the cluster
    reaches the pod through the node, and a stranger is dropped before the rewrite."""
    with link.kube_proxy_nodeport(30080):
        assert link.accepts(CLUSTER, "tcp", 30080).outcome == "connected", "the cluster through the NodePort"
        link.drops(STRANGER, "tcp", 30080)


@pytest.mark.control("fw-01")
def test_fw_01_calicos_ip_in_ip_tunnel_is_let_in_from_the_cluster_only(link):
    """Calico's manifest default carries pods' packets between nodes in IP-in-IP, an IP protocol of its own (4), not a
    port: a firewall of ports alone drops the pod network between nodes."""
    assert link.ipip(CLUSTER) == "accepted"
    assert link.ipip(STRANGER) == "dropped"
    assert link.ipip(POD) == "dropped"


@pytest.mark.control("fw-01")
def test_fw_01_a_cilium_cluster_gets_ciliums_tunnel_health_and_wireguard_and_none_of_calicos(container_node, link):
    """The node's inventory with another CNI profile (and WireGuard on): its ports open from the cluster, Calico's
    close, and the tunnel protocol Calico alone uses is dropped; the suite's profile comes back after."""
    try:
        cilium = node.playbook(container_node.inventory, "--tags", "firewall", extra_vars=CILIUM)
        assert cilium.returncode == 0, cilium.failures() or cilium.stderr[-2000:]
        for what, (proto, port) in CILIUM_ACCEPTED.items():
            assert link.accepts(CLUSTER, proto, port).outcome == "refused", what  # let in; nothing listens there
        for proto, port in CILIUM_DROPPED.values():
            link.drops(CLUSTER, proto, port)
        assert link.ipip(CLUSTER) == "dropped"
    finally:
        restored = node.playbook(container_node.inventory, "--tags", "firewall")
    assert restored.returncode == 0, restored.failures()
    link.drops(CLUSTER, "udp", 8472)
    assert link.accepts(CLUSTER, "tcp", 179).outcome == "refused"


def _tables(container: str) -> set[str]:
    listing = node.podman("exec", container, "nft", "list", "tables").stdout
    return {line.strip() for line in listing.splitlines() if line.startswith("table ")}


@pytest.mark.control("fw-02")
@pytest.mark.control("fw-04")
def test_fw_02_fw_04_reloading_restarting_and_stopping_the_firewall_leave_kube_proxys_table(container_node, link):
    """kube-proxy (nftables mode) keeps its rules in a table of its own, as Calico and Cilium do: the firewall
    service must replace or remove tenantry's table and nothing else, whatever an operator or an upgrade does."""
    name = container_node.address
    ours, theirs = "table inet tenantry_host", "table ip kube-proxy"
    for command in (("table", "ip", "kube-proxy"), ("chain", "ip", "kube-proxy", "services"),
                    ("rule", "ip", "kube-proxy", "services", "counter")):
        node.podman("exec", name, "nft", "add", *command)
    try:
        for action, expected in (("reload", {ours, theirs}), ("restart", {ours, theirs}), ("stop", {theirs}),
                                 ("start", {ours, theirs})):
            done = node.podman("exec", name, "systemctl", action, "nftables", check=False)
            assert done.returncode == 0, f"systemctl {action} nftables: {done.stderr}"
            assert _tables(name) == expected, f"after systemctl {action} nftables"
        assert link.accepts(ADMIN, "tcp", 22).outcome == "connected", "ssh from the admin network after the restarts"
    finally:
        node.podman("exec", name, "nft", "delete", "table", "ip", "kube-proxy", check=False)
