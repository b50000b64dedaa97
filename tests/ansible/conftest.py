"""Throwaway nodes, hardened once per session and shared by every module here: Debian 12 through the chroot
connection (site.yml twice: converge, then the idempotence run), the same hardened tree booted under podman with
systemd (site.yml once more, its services live), and Ubuntu 24.04 through the chroot connection (converged once)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra
from testinfra.host import Host

from tests.ansible import node


@dataclass(frozen=True)
class HardenedNode:
    key: str
    target: str
    rootfs: Path
    inventory: Path
    converge: node.Run
    second_run: node.Run | None
    host: Host


def _tools_present() -> None:
    missing = [tool for tool in ("mmdebstrap", "podman", "runc") if shutil.which(tool) is None]
    assert not missing, f"missing {missing}: `make test` installs them (Makefile DEBIAN_PACKAGES)"
    assert (node.ANSIBLE_BIN / "ansible-playbook").exists(), "no .venv-ansible: `make test` installs it"


SECONDS: dict[str, float] = {}
"""How long each step took, printed at the end of the session (figures, never asserted on)."""


def _timed(step: str, action):
    started = time.monotonic()
    try:
        return action()
    finally:
        SECONDS[step] = time.monotonic() - started


def _harden(key: str, target: str, address: str, connection: str, rootfs: Path, host: Host) -> HardenedNode:
    inventory = node.inventory(node.CACHE / "inventories" / key, key, target, address, connection)
    args = node.NODES[key].playbook_args
    converge = _timed(f"{key}: converge", lambda: node.playbook(inventory, *args))
    second_run = (_timed(f"{key}: second run", lambda: node.playbook(inventory, *args))
                  if converge.returncode == 0 and node.NODES[key].second_run else None)
    return HardenedNode(key, target, rootfs, inventory, converge, second_run, host)


def pytest_terminal_summary(terminalreporter):
    if SECONDS:
        terminalreporter.write_sep("-", "throwaway nodes (seconds)")
        for step, seconds in SECONDS.items():
            terminalreporter.write_line(f"{step}: {seconds:.0f}")


def _chroot_node(key: str) -> HardenedNode:
    distribution = node.NODES[key].distribution
    image = _timed(f"{distribution.name}: image (built or reused)", lambda: node.node_image(distribution))
    rootfs = node.unpack(image, node.CACHE / "nodes" / key)
    return _harden(key, "chroot", str(rootfs), "community.general.chroot", rootfs,
                   testinfra.get_host(str(rootfs), connection="chroot"))


def _container_node(key: str, hardened_tree: HardenedNode) -> HardenedNode:
    """The hardened tree, copied and booted: site.yml there starts what a chroot could not (sshd with the hardened
    configuration, the firewall in the container's network namespace, containerd)."""
    assert hardened_tree.converge.returncode == 0, f"{hardened_tree.key} did not converge: nothing to boot"
    rootfs = node.CACHE / "nodes" / key
    node.podman("rm", "--force", key, check=False)
    if rootfs.exists():
        shutil.rmtree(rootfs)
    subprocess.run(["cp", "-a", str(hardened_tree.rootfs), str(rootfs)], check=True)
    os.environ["CONTAINERS_CONF"] = str(node.containers_conf())  # testinfra's podman exec runs with this session's
    node.boot(rootfs, key)
    state = _timed(f"{key}: boot", lambda: node.wait_for_boot(key))
    assert state in ("running", "degraded"), f"systemd in {key} did not finish starting: {state!r}"
    return _harden(key, "container", key, "containers.podman.podman", rootfs, testinfra.get_host(f"podman://{key}"))


@pytest.fixture(scope="package")
def hardened_nodes():
    """Nodes by key, built on first use: every chroot node at once, two at a time (most of a converge is waiting on
    apt and on process start-up, so two overlap well on two cores), each container once its tree is hardened.
    Once tests/ansible/ is done, before the rest of the suite runs, the containers are removed and the
    trees deleted (a gigabyte each; the images stay cached)."""
    builds: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield builds, pool
        for key in builds:
            if node.NODES[key].target == "container":
                node.podman("rm", "--force", key, check=False)
            shutil.rmtree(node.CACHE / "nodes" / key, ignore_errors=True)  # a gigabyte each; the images stay


def hardened(request, key: str) -> HardenedNode:
    builds, pool = request.getfixturevalue("hardened_nodes")
    if not builds:
        _tools_present()
        builds.update({k: pool.submit(_chroot_node, k) for k, kind in node.NODES.items() if kind.target == "chroot"})
    if key not in builds:
        tree = builds[node.NODES[key].boots].result()
        builds[key] = pool.submit(_container_node, key, tree)
    return builds[key].result()


@pytest.fixture
def chroot_node(request) -> HardenedNode:
    return hardened(request, node.DEBIAN_CHROOT)


@pytest.fixture
def container_node(request) -> HardenedNode:
    return hardened(request, node.DEBIAN_CONTAINER)
