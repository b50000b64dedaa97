"""The hardened throwaway nodes (tests/ansible/builds.py, built in the background as the session begins) handed to the
tests here, removed once tests/ansible/ is done."""

from __future__ import annotations

import shutil

import pytest

from tests.ansible import builds, node, packets
from tests.ansible.builds import HardenedNode


def pytest_terminal_summary(terminalreporter):
    if builds.SECONDS:
        terminalreporter.write_sep("-", "throwaway nodes (seconds)")
        for step, seconds in builds.SECONDS.items():
            terminalreporter.write_line(f"{step}: {seconds:.0f}")


@pytest.fixture(scope="package", autouse=True)
def nodes_removed_at_the_end():
    """Once tests/ansible/ is done, before anything else runs, the containers are removed and the trees deleted
    (a gigabyte each; the images stay cached)."""
    yield
    builds.remove_all()


@pytest.fixture
def chroot_node() -> HardenedNode:
    """The GPU host hardened through the chroot connection (every role)."""
    return builds.hardened(node.UBUNTU_CHROOT)


@pytest.fixture
def debian_node() -> HardenedNode:
    """The Debian host hardened through the chroot connection (the hardening roles; gpu_node refuses Debian)."""
    return builds.hardened(node.DEBIAN_CHROOT)


@pytest.fixture
def container_node() -> HardenedNode:
    return builds.hardened(node.UBUNTU_CONTAINER)


@pytest.fixture(scope="package")
def link() -> packets.Link:
    """The booted node's network namespace joined to a peer namespace that sends from the test's addresses."""
    missing = [tool for tool in ("ip", "nsenter", "python3") if shutil.which(tool) is None]
    assert not missing, f"missing {missing} on the test machine (Debian's iproute2, util-linux, python3)"
    with packets.linked(builds.hardened(node.UBUNTU_CONTAINER).address) as joined:
        yield joined
