"""Throwaway GPU hosts for ansible/: a Debian or Ubuntu root file system built once with mmdebstrap and cached
under .local/ansible/, unpacked per run, hardened by site.yml through the chroot connection, and booted by podman
with systemd where a service must run. Nothing here touches the machine that runs the tests: a chroot gets no live
sysctl, service or firewall change (the `*_live` switches of TARGET_VARS), and the container runs in a network
namespace of its own with no network (tests/ansible/packets.py links it to a peer namespace, never to the host's)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = ROOT / "ansible"
ANSIBLE_BIN = ROOT / ".venv-ansible" / "bin"
TENANTRY = ROOT / ".venv" / "bin" / "tenantry"
CACHE = ROOT / ".local" / "ansible"
WAIVERS = ANSIBLE_DIR / "waivers.yml"
CONTROL_ID = re.compile(r"\[([a-z]+-\d{2})\]$")

STACK = "h100-mig-mixed"
"""The stack whose inventory the test host joins: a MIG pool, so the MIG check (gpu-01) has work to do."""
POOL_GROUP = "pool_h100_mig"
ADMIN, ADMIN_GROUP = "ops", "ssh-users"
"""The admin account a site adds before hardening (ssh_hardening refuses to lock everyone out)."""
ADMIN_NETWORK = "192.0.2.0/24"
"""Where the site's administrators connect from (tests/ansible/packets.py sends from an address in it)."""
CNI_PROFILE, POD_NETWORK = "calico-ipip", "100.64.0.0/16"
"""The cluster's CNI (Calico's manifest default) and pod network, outside the cluster's 10.0.0.0/8 so that a pod's
packets are let in for being a pod's (tests/ansible/packets.py sends from an address in it)."""
SITE_VARS = {"gpu_node_iommu": True, "gpu_node_hugepages_1g": 2}
"""Choices a site makes beyond the defaults, so that the options they switch on are proven too (gpu-07)."""

TARGET_VARS: dict[str, dict[str, bool]] = {
    # No init system and the test machine's kernel and network: nothing may run, load or apply.
    "chroot": {"os_hardening_services_live": False, "os_hardening_sysctl_apply_live": False,
               "ssh_hardening_service_live": False, "firewall_service_live": False,
               "gpu_node_services_live": False, "gpu_node_kernel_live": False},
    # systemd runs and the network namespace is the container's own; kernel and clock stay the test machine's.
    "container": {"os_hardening_services_live": False, "os_hardening_sysctl_apply_live": False,
                  "ssh_hardening_service_live": True, "firewall_service_live": True,
                  "gpu_node_services_live": True, "gpu_node_kernel_live": False},
}
TARGETS = tuple(TARGET_VARS)

NODE_PACKAGES = ("apt", "python3", "openssh-server", "procps", "iproute2", "systemd", "systemd-sysv", "sudo")
"""What a freshly installed server has that minbase lacks: apt (Ubuntu's minbase has none), Ansible's Python, SSH,
and systemd to boot."""


@dataclass(frozen=True)
class Keyring:
    """An archive keyring this machine's apt does not carry, as a package fetched from its archive: pinned by
    digest (trust on first use, then never again), the key file extracted from it."""
    url: str
    sha256: str
    path: str  # inside the package


@dataclass(frozen=True)
class Distribution:
    name: str
    suite: str
    mirror: str
    components: str = "main"
    keyring: Keyring | None = None  # None: mmdebstrap's default, this machine's Debian archive keyring


DEBIAN_12 = Distribution("debian-12", "bookworm", "http://deb.debian.org/debian")
UBUNTU_24 = Distribution(
    "ubuntu-24.04", "noble", "http://archive.ubuntu.com/ubuntu", "main,universe",
    Keyring("http://archive.ubuntu.com/ubuntu/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb",
            "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8",
            "usr/share/keyrings/ubuntu-archive-keyring.gpg"))


@dataclass(frozen=True)
class NodeKind:
    distribution: Distribution
    target: str
    boots: str | None = None  # a container boots the tree of this chroot node once it is hardened
    skip_roles: tuple[str, ...] = ()
    second_run: bool = True

    @property
    def playbook_args(self) -> tuple[str, ...]:
        return ("--skip-tags", ",".join(self.skip_roles)) if self.skip_roles else ()


DEBIAN_CHROOT, UBUNTU_CHROOT, UBUNTU_CONTAINER = "debian-12-chroot", "ubuntu-24.04-chroot", "ubuntu-24.04-container"
NODES: dict[str, NodeKind] = {
    # Debian 12 takes the hardening roles (as a node without GPUs would) and not gpu_node, which refuses it (the
    # GPU Operator has no driver for Debian: gpu-12, tests/ansible/test_refusals.py). Its tree boots in the VM
    # (tests/ansible/vm.py), where its kernel shows what the hardening leaves for a boot.
    DEBIAN_CHROOT: NodeKind(DEBIAN_12, "chroot", skip_roles=("gpu_node",), second_run=False),
    # Ubuntu 24.04, a GPU host: every role, converged twice (the second run changes nothing).
    UBUNTU_CHROOT: NodeKind(UBUNTU_24, "chroot"),
    # The hardened Ubuntu tree booted: every file is already in place, so the first pass there starts services and
    # changes nothing else (a test says so), and a second, with the services, their handlers and the firewall live,
    # changes nothing at all. os_hardening's services (auditd, chrony) cannot run in a container (waivers.yml), so
    # its role is left out of these passes.
    UBUNTU_CONTAINER: NodeKind(UBUNTU_24, "container", boots=UBUNTU_CHROOT, skip_roles=("os_hardening",)),
}


def controls_of(key: str) -> set[str]:
    """The controls whose roles hardened the node's tree (a container's tree is its chroot's)."""
    kind = NODES[key]
    return set(control_tasks(NODES[kind.boots].skip_roles if kind.boots else kind.skip_roles))


def node_image(distribution: Distribution) -> Path:
    """The distribution's root file system as a tarball, built once (about a minute) and reused: its name carries a
    digest of everything it is built from, so a change to the package list builds a new one."""
    recipe = json.dumps([distribution.suite, distribution.mirror, distribution.components,
                         distribution.keyring and distribution.keyring.sha256, NODE_PACKAGES])
    image = CACHE / "images" / f"{distribution.name}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}.tar"
    if image.exists():
        return image
    image.parent.mkdir(parents=True, exist_ok=True)
    partial = image.with_suffix(".partial.tar")
    partial.unlink(missing_ok=True)  # what a failed build left
    with tempfile.TemporaryDirectory() as readable:
        keyring = []
        if distribution.keyring:
            # apt verifies as the _apt user, which cannot reach into a clone under a 0700 folder (root's home,
            # mktemp -d): the key goes where it can read it, for the build's duration.
            os.chmod(readable, 0o755)
            key = Path(readable) / "archive-keyring.gpg"
            shutil.copyfile(archive_keyring(distribution.keyring), key)
            key.chmod(0o644)
            keyring = [f"--keyring={key}"]
        subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(NODE_PACKAGES)}",
                        f"--components={distribution.components}", *keyring, distribution.suite, str(partial),
                        distribution.mirror], check=True)
    partial.rename(image)
    return image


def archive_keyring(keyring: Keyring) -> Path:
    """The key file, from the package fetched once and checked against its pinned digest."""
    directory = CACHE / "keyrings" / keyring.sha256[:12]
    key = directory / keyring.path
    if key.exists():
        return key
    directory.mkdir(parents=True, exist_ok=True)
    package = directory / "keyring.deb"
    with urllib.request.urlopen(keyring.url, timeout=60) as answer:
        package.write_bytes(answer.read())
    digest = hashlib.sha256(package.read_bytes()).hexdigest()
    if digest != keyring.sha256:
        package.unlink()
        raise RuntimeError(f"{keyring.url}: sha256 {digest}, pinned {keyring.sha256}")
    subprocess.run(["dpkg-deb", "--extract", str(package), str(directory)], check=True)
    return key


def unpack(image: Path, rootfs: Path) -> Path:
    """A fresh node from the image: what a site has before hardening (DNS, the admin account in the SSH group),
    and services kept from starting inside the chroot while packages install."""
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(rootfs), "-xf", str(image)], check=True)
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
    policy = rootfs / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# No service starts in the chroot (invoke-rc.d's policy, exit 101).\nexit 101\n")
    policy.chmod(0o755)
    for command in (["groupadd", "--system", ADMIN_GROUP], ["useradd", "--create-home", "--groups", ADMIN_GROUP,
                                                           "--shell", "/bin/bash", ADMIN]):
        subprocess.run(["chroot", str(rootfs), *command], check=True)
    _swap_file(rootfs)
    _admin_key(rootfs)
    return rootfs


_KEY_LOCK = threading.Lock()


def admin_key() -> Path:
    """The admin's SSH key, made once: the controller logs in with it as a site's Ansible does."""
    key = CACHE / "keys" / "admin_ed25519"
    with _KEY_LOCK:
        if key.exists():
            return key
        key.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tenantry-test-admin", "-f", str(key)],
                       check=True)
    return key


def _admin_key(rootfs: Path) -> None:
    """The admin account as a site sets it up before hardening: its key authorised, and sudo without a password
    (Ansible's become), as cloud images and installers give their first user."""
    home = rootfs / "home" / ADMIN / ".ssh"
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "authorized_keys").write_text(admin_key().with_suffix(".pub").read_text())
    (home / "authorized_keys").chmod(0o600)
    subprocess.run(["chroot", str(rootfs), "chown", "-R", f"{ADMIN}:{ADMIN}", f"/home/{ADMIN}/.ssh"], check=True)
    sudoers = rootfs / "etc" / "sudoers.d" / ADMIN
    sudoers.write_text(f"{ADMIN} ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)


SWAP_MB = 16


def _swap_file(rootfs: Path) -> None:
    """A swap file in fstab, as installers set up: the kubelet will not start beside it (os-22). Its pages are
    random, not zeros, so that copying the tree onto the VM's disk (mkfs.ext4 -d) leaves no holes swapon refuses."""
    swap = rootfs / "swapfile"
    swap.write_bytes(os.urandom(SWAP_MB * 1024 * 1024))
    swap.chmod(0o600)
    subprocess.run(["mkswap", str(swap)], check=True, capture_output=True)
    with (rootfs / "etc" / "fstab").open("a") as fstab:
        fstab.write("/swapfile none swap sw 0 0\n")


def inventory(out: Path, host: str, target: str, address: str, connection: str) -> Path:
    """The stack's inventory as `tenantry inventory` writes it, with its first MIG pool's host replaced by the
    throwaway node and the target's switches."""
    subprocess.run([str(TENANTRY), "inventory", STACK, "--out", str(out), "--admin-cidr", ADMIN_NETWORK,
                    "--cni", CNI_PROFILE, "--pod-cidr", POD_NETWORK], check=True, capture_output=True)
    hosts = yaml.safe_load((out / "hosts.yml").read_text())
    pool = hosts["all"]["children"]["gpu_pools"]["children"][POOL_GROUP]
    pool["hosts"] = {host: {"ansible_host": address, "ansible_connection": connection, **SITE_VARS,
                            **TARGET_VARS[target]}}
    hosts["all"]["children"]["gpu_pools"]["children"] = {POOL_GROUP: pool}
    (out / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    return out


def ssh_inventory(base: Path, out: Path, host: str, address: str, source: str | None = None, port: int = 22,
                  extra: dict | None = None) -> Path:
    """The node's inventory (base) reached the way a site's controller reaches a host: over SSH to address and port,
    from source (or wherever the route says), as the admin with its key, sudo for become; extra host variables on
    top."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(base, out)
    hosts = yaml.safe_load((out / "hosts.yml").read_text())
    group = hosts["all"]["children"]["gpu_pools"]["children"][POOL_GROUP]
    bind = f"-o BindAddress={source} " if source else ""
    group["hosts"][host].update({
        "ansible_host": address, "ansible_port": port, "ansible_connection": "ssh", "ansible_user": ADMIN,
        "ansible_become": True, "ansible_ssh_private_key_file": str(admin_key()),
        "ansible_ssh_common_args": f"{bind}-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        "ansible_ssh_args": "-o ControlMaster=no", **(extra or {})})  # no master left running once the play is over
    (out / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    return out


@dataclass(frozen=True)
class TaskResult:
    name: str
    status: str  # ok, changed, skipped, failed, unreachable
    message: str

    @property
    def control(self) -> str | None:
        found = CONTROL_ID.search(self.name)
        return found.group(1) if found else None


@dataclass(frozen=True)
class Run:
    returncode: int
    tasks: tuple[TaskResult, ...]
    stats: dict[str, int]
    stderr: str

    def failures(self) -> list[str]:
        return [f"{t.name}: {t.status}: {t.message}" for t in self.tasks if t.status in ("failed", "unreachable")]


def playbook(inventory_dir: Path, *args: str, extra_vars: dict | None = None, netns: str | None = None) -> Run:
    """site.yml (or what args name) through ansible-playbook with the JSON callback: each task's outcome on the
    one host and the recap's counts. With netns, the controller runs in that network namespace (a peer of the
    node's, where it connects from over SSH)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_PIPELINING": "1", "CONTAINERS_CONF": str(containers_conf())}
    extra = ["--extra-vars", json.dumps(extra_vars)] if extra_vars else []
    inside = ["ip", "netns", "exec", netns] if netns else []
    done = subprocess.run([*inside, str(ANSIBLE_BIN / "ansible-playbook"), "-i", str(inventory_dir), *extra, *args,
                           str(ANSIBLE_DIR / "site.yml")], cwd=ANSIBLE_DIR, env=env, capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Run(done.returncode, (), {}, done.stderr + done.stdout)
    tasks = tuple(_task_result(task) for play in report["plays"] for task in play["tasks"])
    stats = next(iter(report["stats"].values()), {})
    return Run(done.returncode, tasks, stats, done.stderr)


def _task_result(task: dict) -> TaskResult:
    result = next(iter(task["hosts"].values()), {})
    status = ("unreachable" if result.get("unreachable") else "failed" if result.get("failed")
              else "skipped" if result.get("skipped") else "changed" if result.get("changed") else "ok")
    return TaskResult(task["task"]["name"], status, str(result.get("msg", "")))


def containers_conf() -> Path:
    """podman's settings for the throwaway node: runc (Debian's podman finds no crun here), cgroupfs (the test
    machine need not run systemd), file events, and ulimits systemd can start under."""
    conf = CACHE / "containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n'
                    '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n')
    return conf


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env={**os.environ, "CONTAINERS_CONF": str(containers_conf())},
                          capture_output=True, text=True, check=check)


def container_name(key: str) -> str:
    """The node's container, named for this checkout too: two checkouts testing on one machine (a working tree and a
    fresh clone, two CI jobs) each boot and remove their own (a clone once lost its container to another's cleanup)."""
    return f"{key}-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"


def boot(rootfs: Path, name: str) -> str:
    """The node booted with systemd as PID 1: its own network namespace with no network (--network none) and
    NET_ADMIN only there, so the firewall loads into the container and never into the test machine."""
    (rootfs / "usr" / "sbin" / "policy-rc.d").unlink(missing_ok=True)
    podman("rm", "--force", name, check=False)
    podman("run", "--detach", "--name", name, "--network", "none", "--cap-add", "NET_ADMIN", "--systemd", "always",
           "--rootfs", str(rootfs), "/lib/systemd/systemd")
    return name


def wait_for_boot(name: str, attempts: int = 60) -> str:
    """systemd's state once start-up has finished (running or degraded); bounded to attempts x 1 s."""
    state = ""
    for _ in range(attempts):
        state = podman("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
        if state not in ("", "initializing", "starting"):
            return state
        time.sleep(1)
    return state


def waivers() -> dict[str, dict[str, dict]]:
    """ansible/waivers.yml: target kind -> control -> {why, facts (absent: every fact)}."""
    return yaml.safe_load(WAIVERS.read_text())


def unproven() -> dict[str, dict]:
    """ansible/waivers.yml's facts that no kind shows: control -> {facts, why}."""
    return waivers().get("unproven", {})


def waiver(target: str, control: str, fact: str | None = None) -> str | None:
    """Why the control (or one of its facts) is not shown on the target, or None when it must be."""
    entry = waivers().get(target, {}).get(control)
    if entry is None or (fact is not None and "facts" in entry and fact not in entry["facts"]):
        return None
    return " ".join(entry["why"].split())


@functools.cache  # read for every fact of every kind as the tests are collected; the roles do not change meanwhile
def control_tasks(skip_roles: tuple[str, ...] = ()) -> dict[str, str]:
    """Every control of ansible/ (outside the roles skipped) and the task name that carries its ID."""
    found: dict[str, str] = {}
    for path in sorted(ANSIBLE_DIR.glob("roles/*/tasks/*.yml")):
        if path.parts[-3] in skip_roles:
            continue
        for task in yaml.safe_load(path.read_text()) or []:
            name = task.get("name", "")
            if match := CONTROL_ID.search(name):
                assert match.group(1) not in found, f"{match.group(1)} names two tasks: {found[match.group(1)]!r}, {name!r}"
                found[match.group(1)] = name
    return found
