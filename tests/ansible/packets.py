"""Packets that meet the hardened node's firewall: the booted container's network namespace joined by a veth pair
to a peer namespace of this test's own, which sends from an admin, a cluster, a stranger's and a site's extra
address (SOURCES), and by another to a pod's namespace behind the node (a NodePort's backend). Nothing touches the
test machine's own network: every end of the links lives in namespaces created here and deleted after.

A probe's verdict never rests on how long an answer takes: a packet the firewall accepts is answered (a TCP
handshake, or a reset or port-unreachable from the kernel when nothing listens), waited for up to ANSWER_SECONDS;
a packet it drops is seen by the drop counters that end tenantry's chains, and nothing else sends to the
node (IPv6 is off on the link, so no neighbour discovery or MLD reaches the counter)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.ansible import node

NODE_ADDRESS = "198.18.0.1"
ADMIN, CLUSTER, STRANGER, SITE_ADMIN, POD = "192.0.2.10", "10.1.2.3", "203.0.113.7", "198.51.100.7", "100.64.3.4"
"""Inside firewall_admin_cidrs (node.ADMIN_NETWORK), inside firewall_cluster_cidrs (10.0.0.0/8), inside neither, an
address a site adds as an admin network of its own (test_overrides.py), and a pod's (node.POD_NETWORK)."""
SOURCES = {ADMIN: node.ADMIN_NETWORK, CLUSTER: "10.0.0.0/8", STRANGER: "203.0.113.0/24", SITE_ADMIN: "198.51.100.0/24",
           POD: node.POD_NETWORK}
ANSWER_SECONDS = 60.0
"""How long an accepted packet's answer may take on a loaded machine; an answer normally comes in milliseconds."""
DROP_SECONDS = 2.0
"""How long a probe the counter proves dropped waits before giving up (nothing can answer a dropped packet)."""
DROP_COUNTERS = {"input": "dropped by tenantry's host policy", "nodeports": "NodePort dropped by tenantry's host policy"}
"""The rules that end tenantry's chains, each counting what it drops: the input chain's, and the NodePort chain's,
which drops before kube-proxy's DNAT."""
POD_ADDRESS, POD_PORT = "10.244.0.5", 8080
"""A pod behind the node, in a namespace of its own (as a CNI gives a pod), listening for a NodePort's traffic."""
_POD = """
import socket, sys
with socket.create_server((sys.argv[1], int(sys.argv[2]))) as server:
    while True:
        connection, _ = server.accept()
        connection.close()
"""


@dataclass(frozen=True)
class Answer:
    outcome: str  # connected, refused or silent
    banner: str = ""


SSH_PORTS = (22, 2222)
"""Where sshd listens in these tests (2222: test_lockout_live.py's port change): a probe there reads its banner."""

_PROBE = """
import json, socket, sys
source, proto, port, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
with socket.socket(socket.AF_INET, kind) as s:
    s.bind((source, 0))
    s.settimeout(seconds)
    try:
        s.connect((sys.argv[5], port))
        if proto == "tcp":
            banner = s.recv(64).decode(errors="replace") if sys.argv[6] == "banner" else ""
        else:
            s.send(b"probe")
            s.recv(64)
            banner = ""
        print(json.dumps({"outcome": "connected", "banner": banner}))
    except ConnectionRefusedError:
        print(json.dumps({"outcome": "refused"}))
    except (socket.timeout, TimeoutError):
        print(json.dumps({"outcome": "silent"}))
"""


_IPIP = """
import socket, sys
# An IPv4 packet carried in IP-in-IP (protocol 4), as Calico's tunnel sends a pod's packet to another node: the
# kernel writes the outer header; the inner one (20 bytes, no payload) is never delivered, only let in or dropped.
inner = bytes.fromhex("45000014000000004001" "0000" "0a0a0001" "0a0a0002")
with socket.socket(socket.AF_INET, socket.SOCK_RAW, 4) as s:
    s.bind((sys.argv[1], 0))
    s.sendto(inner, (sys.argv[2], 0))
"""
PASSED = "tenantry-test-passed"
"""A table the test adds to the node to count the IP-in-IP packets tenantry's input chain let through: a base chain
hooked after it, which a packet reaches only if it was not dropped."""
VERDICT_SECONDS = 60.0
"""How long an IP-in-IP packet may take to meet either counter on a loaded machine; normally microseconds."""


@dataclass(frozen=True)
class Link:
    container: str
    peer_namespace: str

    def probe(self, source: str, proto: str, port: int, seconds: float) -> Answer:
        """One connection (TCP) or datagram (UDP) from source to the node's port, and what came back."""
        done = subprocess.run(["ip", "netns", "exec", self.peer_namespace, "python3", "-c", _PROBE, source, proto,
                               str(port), str(seconds), NODE_ADDRESS,
                               "banner" if port in SSH_PORTS else "-"], capture_output=True, text=True,
                              timeout=seconds + 60, check=True)
        return Answer(**json.loads(done.stdout))

    def accepts(self, source: str, proto: str, port: int) -> Answer:
        """The answer to an accepted probe; fails, with the counter's movement, if the firewall dropped it."""
        before = self.dropped()
        answer = self.probe(source, proto, port, ANSWER_SECONDS)
        assert self.dropped() == before and answer.outcome != "silent", \
            f"{source} -> {proto}/{port}: {answer}, drop counter {before} -> {self.dropped()}"
        return answer

    def drops(self, source: str, proto: str, port: int) -> None:
        """The probe dropped, as the firewall's own counter counts, and unanswered."""
        before = self.dropped()
        answer = self.probe(source, proto, port, DROP_SECONDS)
        after = self.dropped()
        assert after > before, f"{source} -> {proto}/{port}: the drop counter stayed at {before} ({answer})"
        assert answer.outcome == "silent", f"{source} -> {proto}/{port}: {answer} although the firewall counted a drop"

    def dropped(self) -> int:
        """Packets counted by the rules that end tenantry's chains (input, nodeports), read inside the node."""
        listing = json.loads(node.podman("exec", self.container, "nft", "--json", "list", "table", "inet",
                                         "tenantry_host").stdout)
        counts = {item["rule"].get("comment"): next(e["counter"]["packets"] for e in item["rule"]["expr"]
                                                    if "counter" in e)
                  for item in listing["nftables"] if "rule" in item and item["rule"].get("comment") in
                  DROP_COUNTERS.values()}
        assert set(counts) == set(DROP_COUNTERS.values()), f"tenantry's table lacks a drop counter: {listing}"
        return sum(counts.values())

    def ipip(self, source: str) -> str:
        """One IP-in-IP packet from source to the node, and what tenantry's input chain did with it: "accepted" (a
        chain hooked after it, PASSED, counted it) or "dropped" (its drop counter did). Nothing answers a tunnel's
        packet, so the verdict is the node's own count, waited for until one of the two has it."""
        table = ("table", "inet", PASSED)
        node.podman("exec", self.container, "nft", "add", *table)
        try:
            node.podman("exec", self.container, "nft", "add", "chain", "inet", PASSED, "input",
                        "{ type filter hook input priority filter + 10; policy accept; }")
            node.podman("exec", self.container, "nft", "add", "rule", "inet", PASSED, "input", "ip", "protocol", "4",
                        "counter")
            before = self.dropped()
            subprocess.run(["ip", "netns", "exec", self.peer_namespace, "python3", "-c", _IPIP, source, NODE_ADDRESS],
                           check=True, capture_output=True, text=True, timeout=60)
            deadline = time.monotonic() + VERDICT_SECONDS
            while (passed := self._passed()) + (dropped := self.dropped() - before) == 0:
                assert time.monotonic() < deadline, f"IP-in-IP from {source}: counted neither passed nor dropped"
                time.sleep(0.2)
            assert passed + dropped == 1, f"IP-in-IP from {source}: {passed} passed, {dropped} dropped"
            return "accepted" if passed else "dropped"
        finally:
            node.podman("exec", self.container, "nft", "delete", *table, check=False)

    def _passed(self) -> int:
        listing = json.loads(node.podman("exec", self.container, "nft", "--json", "list", "table", "inet",
                                         PASSED).stdout)
        return next(e["counter"]["packets"] for item in listing["nftables"] if "rule" in item
                    for e in item["rule"]["expr"] if "counter" in e)

    @contextmanager
    def kube_proxy_nodeport(self, port: int) -> Iterator[None]:
        """A stand-in for kube-proxy's NodePort rule (its nftables mode: a nat table of its own, DNAT at dstnat in
        prerouting) sending the node's port to the pod; removed afterwards."""
        table = ("table", "ip", "kube-proxy-standin")
        node.podman("exec", self.container, "nft", "add", *table)
        try:
            node.podman("exec", self.container, "nft", "add", "chain", "ip", "kube-proxy-standin", "nodeports",
                        "{ type nat hook prerouting priority dstnat; policy accept; }")
            node.podman("exec", self.container, "nft", "add", "rule", "ip", "kube-proxy-standin", "nodeports",
                        "tcp", "dport", str(port), "dnat", "to", f"{POD_ADDRESS}:{POD_PORT}")
            yield
        finally:
            node.podman("exec", self.container, "nft", "delete", *table, check=False)


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


@contextmanager
def linked(container: str) -> Iterator[Link]:
    """The running container's namespace joined to a new peer namespace holding the source addresses, and to a
    pod's namespace behind it (forwarding on in the node, as on a Kubernetes node)."""
    pid = node.podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
    suffix = str(os.getpid() % 100000)
    peer, pod = f"tenantry-fw-{suffix}", f"tenantry-pod-{suffix}"
    inside = ["nsenter", "--target", pid, "--net"]
    _run("ip", "netns", "add", peer)
    _run("ip", "netns", "add", pod)
    listener = None
    try:
        _join(pid, peer, f"tfwn{suffix}", f"tfwp{suffix}", (*SOURCES.values(),), (*SOURCES,))
        _join(pid, pod, f"tfwq{suffix}", f"tfwo{suffix}", (f"{POD_ADDRESS}/32",), (POD_ADDRESS,))
        _run(*inside, "sysctl", "--quiet", "--write", "net.ipv4.ip_forward=1")
        # Through the node, as a pod's default route goes: the node's end answers ARP for its own address.
        _run("ip", "netns", "exec", pod, "ip", "route", "add", "default", "via", NODE_ADDRESS, "dev", f"tfwo{suffix}",
             "onlink")
        listener = subprocess.Popen(["ip", "netns", "exec", pod, "python3", "-c", _POD, POD_ADDRESS, str(POD_PORT)])
        yield Link(container, peer)
    finally:
        if listener is not None:
            listener.kill()
            listener.wait()
        for node_end in (f"tfwn{suffix}", f"tfwq{suffix}"):
            subprocess.run([*inside, "ip", "link", "delete", node_end], capture_output=True, check=False)
        for namespace in (peer, pod):
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, check=False)


def _join(pid: str, namespace: str, node_end: str, far_end: str, routes: tuple[str, ...],
          addresses: tuple[str, ...]) -> None:
    """A veth pair from the node to the namespace, IPv6 off on both ends (no neighbour discovery reaches the drop
    counters), the node's address on its end, the routes to the namespace's networks, its addresses on the far end."""
    inside = ["nsenter", "--target", pid, "--net"]
    _run("ip", "link", "add", node_end, "type", "veth", "peer", "name", far_end)
    _run("ip", "link", "set", node_end, "netns", pid)
    _run("ip", "link", "set", far_end, "netns", namespace)
    _run(*inside, "sysctl", "--quiet", "--write", f"net.ipv6.conf.{node_end}.disable_ipv6=1")
    _run("ip", "netns", "exec", namespace, "sysctl", "--quiet", "--write", f"net.ipv6.conf.{far_end}.disable_ipv6=1")
    _run(*inside, "ip", "address", "add", f"{NODE_ADDRESS}/32", "dev", node_end)
    _run(*inside, "ip", "link", "set", node_end, "up")
    for cidr in routes:
        _run(*inside, "ip", "route", "add", cidr, "dev", node_end)
    for address in addresses:
        _run("ip", "netns", "exec", namespace, "ip", "address", "add", f"{address}/32", "dev", far_end)
    _run("ip", "netns", "exec", namespace, "ip", "link", "set", far_end, "up")
    _run("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
    _run("ip", "netns", "exec", namespace, "ip", "route", "add", f"{NODE_ADDRESS}/32", "dev", far_end)
