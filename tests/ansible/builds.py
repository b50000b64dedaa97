"""Throwaway nodes, hardened once per session in the background and shared by every module of tests/ansible/: Ubuntu
24.04 through the chroot connection (site.yml twice: converge, then the idempotence run), the same hardened tree booted
under podman with systemd (site.yml twice more, its services live), Debian 12 through the chroot connection (the
hardening roles, converged once) and its tree booted by its own kernel in a VM.

The builds start as the session begins (tests/conftest.py), once the live stacks serve (engines loading beside a
converge starve on two cores), and run while the live tests do: most of a build is apt and process start-up, most of
a live test is waiting on a scenario's stages, a timer or a restart. tests/ansible/ runs last and finds its nodes
built (issue 33: make test in 30 minutes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import testinfra
from testinfra.host import Host

from tests.ansible import node, vm

TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class HardenedNode:
    key: str
    target: str
    address: str  # the chroot's folder or the container's name
    rootfs: Path
    inventory: Path
    converge: node.Run
    second_run: node.Run | None
    host: Host


SECONDS: dict[str, float] = {}
"""How long each step took, printed at the end of the session (figures, never asserted on)."""

_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ansible-node")
"""Two at a time: most of a converge is waiting on apt and on process start-up, so two overlap well on two cores."""
_builds: dict[str, Future] = {}
VM, VM_TREE = "debian-12-vm", node.DEBIAN_CHROOT
"""The hardened Debian tree booted by its own kernel (tests/ansible/vm.py), built after the nodes and kept apart from
node.NODES: no playbook runs in it, it shows what the Debian chroot's runs left for a boot to apply."""


def _tools_present() -> None:
    missing = [tool for tool in ("mmdebstrap", "podman", "runc", "qemu-system-x86_64", "mkfs.ext4")
               if shutil.which(tool) is None]
    assert not missing, f"missing {missing}: `make test` installs them (Makefile DEBIAN_PACKAGES)"
    assert (node.ANSIBLE_BIN / "ansible-playbook").exists(), "no .venv-ansible: `make test` installs it"


def timed(step: str, action):
    started = time.monotonic()
    try:
        return action()
    finally:
        SECONDS[step] = time.monotonic() - started


def _harden(key: str, target: str, address: str, connection: str, rootfs: Path, host: Host) -> HardenedNode:
    inventory = node.inventory(node.CACHE / "inventories" / key, key, target, address, connection)
    args = node.NODES[key].playbook_args
    converge = timed(f"{key}: converge", lambda: node.playbook(inventory, *args))
    second_run = (timed(f"{key}: second run", lambda: node.playbook(inventory, *args))
                  if converge.returncode == 0 and node.NODES[key].second_run else None)
    return HardenedNode(key, target, address, rootfs, inventory, converge, second_run, host)


def _chroot_node(key: str, after: Callable[[], None]) -> HardenedNode:
    after()
    _tools_present()
    distribution = node.NODES[key].distribution
    image = timed(f"{distribution.name}: image (built or reused)", lambda: node.node_image(distribution))
    rootfs = node.unpack(image, node.CACHE / "nodes" / key)
    return _harden(key, "chroot", str(rootfs), "community.general.chroot", rootfs,
                   testinfra.get_host(str(rootfs), connection="chroot"))


def _container_node(key: str, tree: Future) -> HardenedNode:
    """The hardened tree, copied and booted: site.yml there starts what a chroot could not (sshd with the hardened
    configuration, the firewall in the container's network namespace, containerd)."""
    hardened_tree: HardenedNode = tree.result()
    assert hardened_tree.converge.returncode == 0, f"{hardened_tree.key} did not converge: nothing to boot"
    rootfs, name = node.CACHE / "nodes" / key, node.container_name(key)
    node.podman("rm", "--force", name, check=False)
    if rootfs.exists():
        shutil.rmtree(rootfs)
    subprocess.run(["cp", "-a", str(hardened_tree.rootfs), str(rootfs)], check=True)
    os.environ["CONTAINERS_CONF"] = str(node.containers_conf())  # testinfra's podman exec runs with this session's
    node.boot(rootfs, name)
    state = timed(f"{key}: boot", lambda: node.wait_for_boot(name))
    assert state in ("running", "degraded"), f"systemd in {key} did not finish starting: {state!r}"
    return _harden(key, "container", name, "containers.podman.podman", rootfs, testinfra.get_host(f"podman://{name}"))


def _vm(tree: Future) -> vm.BootedVM:
    hardened_tree: HardenedNode = tree.result()
    assert hardened_tree.converge.returncode == 0, f"{hardened_tree.key} did not converge: nothing to boot"
    folder = node.CACHE / "nodes" / VM
    folder.mkdir(parents=True, exist_ok=True)
    tree = folder / "tree"
    kernel, initramfs = timed(f"{VM}: kernel installed", lambda: vm.prepare_tree(hardened_tree.rootfs, tree))
    image = timed(f"{VM}: disk", lambda: vm.disk(tree, folder / "disk.img"))
    kernel, initramfs = (Path(shutil.copy(path, folder)) for path in (kernel, initramfs))
    shutil.rmtree(tree)  # the disk holds it now
    return timed(f"{VM}: boot", lambda: vm.boot(kernel, initramfs, image, folder))


def needed(items) -> bool:
    return any(Path(item.path).is_relative_to(TESTS) for item in items)


def start(after: Callable[[], None] = lambda: None) -> None:
    """Every node's build under way, the chroots first (each after `after()` returned), then the VM and each
    container once their trees are hardened."""
    if _builds:
        return
    _builds.update({k: _pool.submit(_chroot_node, k, after) for k, kind in node.NODES.items()
                    if kind.target == "chroot"})
    # The VM before the container: Debian's tree (hardening roles only, converged once) is ready well before
    # Ubuntu's (every role, twice), and a worker waiting on a tree does nothing else.
    _builds[VM] = _pool.submit(_vm, _builds[VM_TREE])
    _builds.update({k: _pool.submit(_container_node, k, _builds[kind.boots]) for k, kind in node.NODES.items()
                    if kind.target == "container"})


def booted_vm() -> vm.BootedVM:
    """The VM once booted (its build started now if the session did not start it); a failed build raises."""
    start()
    return _builds[VM].result()


def hardened(key: str) -> HardenedNode:
    """The node once built (its build started now if the session did not start it); a failed build raises."""
    start()
    return _builds[key].result()


def remove_all() -> None:
    """The containers removed and the trees deleted (a gigabyte each; the images stay cached), once every build
    under way has ended (those not started yet are not)."""
    for build in _builds.values():
        build.cancel()
    for key, build in list(_builds.items()):
        if not build.cancelled():
            build.exception()  # wait for it, whatever its end
        if key == VM:
            if not build.cancelled() and build.exception() is None:
                build.result().stop()
        elif node.NODES[key].target == "container":
            node.podman("rm", "--force", node.container_name(key), check=False)
        shutil.rmtree(node.CACHE / "nodes" / key, ignore_errors=True)
    _builds.clear()
