"""Packets that meet the hardened node's firewall: the booted container's network namespace joined by a veth pair
to a peer namespace of this test's own, which sends from an admin, a cluster, a stranger's and a site's extra
address (SOURCES). Nothing
touches the test machine's own network: both ends of the link live in namespaces created here and deleted after.

A probe's verdict never rests on how long an answer takes: a packet the firewall accepts is answered (a TCP
handshake, or a reset or port-unreachable from the kernel when nothing listens), waited for up to ANSWER_SECONDS;
a packet it drops is seen by the drop counter at the end of tenantry's input chain, and nothing else sends to the
node (IPv6 is off on the link, so no neighbour discovery or MLD reaches the counter)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.ansible import node

NODE_ADDRESS = "198.18.0.1"
ADMIN, CLUSTER, STRANGER, SITE_ADMIN = "192.0.2.10", "10.1.2.3", "203.0.113.7", "198.51.100.7"
"""Inside firewall_admin_cidrs (192.0.2.0/24), inside firewall_cluster_cidrs and firewall_monitoring_cidrs
(10.0.0.0/8), inside neither, and an address a site adds as an admin network of its own (test_overrides.py)."""
SOURCES = {ADMIN: "192.0.2.0/24", CLUSTER: "10.0.0.0/8", STRANGER: "203.0.113.0/24", SITE_ADMIN: "198.51.100.0/24"}
ANSWER_SECONDS = 60.0
"""How long an accepted packet's answer may take on a loaded machine; an answer normally comes in milliseconds."""
DROP_SECONDS = 2.0
"""How long a probe the counter proves dropped waits before giving up (nothing can answer a dropped packet)."""
DROP_COUNTER = "dropped by tenantry's host policy"


@dataclass(frozen=True)
class Answer:
    outcome: str  # connected, refused or silent
    banner: str = ""


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
            banner = s.recv(64).decode(errors="replace") if port == 22 else ""
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


@dataclass(frozen=True)
class Link:
    container: str
    peer_namespace: str

    def probe(self, source: str, proto: str, port: int, seconds: float) -> Answer:
        """One connection (TCP) or datagram (UDP) from source to the node's port, and what came back."""
        done = subprocess.run(["ip", "netns", "exec", self.peer_namespace, "python3", "-c", _PROBE, source, proto,
                               str(port), str(seconds), NODE_ADDRESS], capture_output=True, text=True,
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
        """Packets counted by the rule that ends tenantry's input chain, read inside the node."""
        listing = json.loads(node.podman("exec", self.container, "nft", "--json", "list", "chain", "inet",
                                         "tenantry_host", "input").stdout)
        for item in listing["nftables"]:
            rule = item.get("rule")
            if rule and rule.get("comment") == DROP_COUNTER:
                return next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
        raise AssertionError(f"no rule {DROP_COUNTER!r} in tenantry's input chain: {listing}")


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


@contextmanager
def linked(container: str) -> Iterator[Link]:
    """The running container's namespace joined to a new peer namespace holding the three source addresses."""
    pid = node.podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
    suffix = str(os.getpid() % 100000)
    peer, node_end, peer_end = f"tenantry-fw-{suffix}", f"tfwn{suffix}", f"tfwp{suffix}"
    inside = ["nsenter", "--target", pid, "--net"]
    _run("ip", "netns", "add", peer)
    try:
        _run("ip", "link", "add", node_end, "type", "veth", "peer", "name", peer_end)
        _run("ip", "link", "set", node_end, "netns", pid)
        _run("ip", "link", "set", peer_end, "netns", peer)
        _run(*inside, "sysctl", "--quiet", "--write", f"net.ipv6.conf.{node_end}.disable_ipv6=1")
        _run("ip", "netns", "exec", peer, "sysctl", "--quiet", "--write", f"net.ipv6.conf.{peer_end}.disable_ipv6=1")
        _run(*inside, "ip", "address", "add", f"{NODE_ADDRESS}/32", "dev", node_end)
        _run(*inside, "ip", "link", "set", node_end, "up")
        for cidr in SOURCES.values():
            _run(*inside, "ip", "route", "add", cidr, "dev", node_end)
        for source in SOURCES:
            _run("ip", "netns", "exec", peer, "ip", "address", "add", f"{source}/32", "dev", peer_end)
        _run("ip", "netns", "exec", peer, "ip", "link", "set", peer_end, "up")
        _run("ip", "netns", "exec", peer, "ip", "link", "set", "lo", "up")
        _run("ip", "netns", "exec", peer, "ip", "route", "add", f"{NODE_ADDRESS}/32", "dev", peer_end)
        yield Link(container, peer)
    finally:
        subprocess.run([*inside, "ip", "link", "delete", node_end], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "delete", peer], capture_output=True, check=False)
