"""The hardened Debian tree booted by the node's own kernel in a throwaway virtual machine, where what only a kernel
shows is read live: kernel parameters in force, modules loaded at boot, the module blacklist refusing a load. A chroot
and a container share the test machine's kernel (waivers.yml), so there those are files read, never effects.

The tree is a copy of the Debian chroot node once hardened, with the kernel Debian's installer gives a server
(linux-image-amd64 from the node's own archive, its initramfs built by initramfs-tools as on any Debian host) and
tests/ansible/vm_agent.py, which answers the test's commands on the second serial port: testinfra reads the VM through
it as it reads a container through `podman exec`. Nothing else is added, and no network: what the node's boot applies
is all there is. The machine is emulated (qemu's TCG) on one core: this machine's /dev/kvm is nested and hung a guest
before its kernel printed a line (qemu 7.2, 2026-12-07), while TCG boots the node in a minute or two."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testinfra.backend import base
from testinfra.host import Host

from tests.ansible import node
from tests.ports import free_port

KERNEL_PACKAGE = "linux-image-amd64"
MEMORY_MB = 1024
BOOT_SECONDS = 900.0
"""Bound on an emulated boot, agent up and systemd's start-up finished, on a machine busy with the live tests."""
COMMAND_SECONDS = 120.0
AGENT = Path(__file__).with_name("vm_agent.py")
AGENT_UNIT = """[Unit]
Description=tenantry test agent (a throwaway test VM only)
After=systemd-sysctl.service systemd-modules-load.service

[Service]
ExecStart=/usr/bin/python3 /usr/local/sbin/tenantry-vm-agent

[Install]
WantedBy=multi-user.target
"""


def prepare_tree(hardened_tree: Path, tree: Path) -> tuple[Path, Path]:
    """The hardened tree copied, with the node's kernel and initramfs installed and the agent enabled; the kernel's
    and the initramfs's paths."""
    if tree.exists():
        shutil.rmtree(tree)
    subprocess.run(["cp", "-a", str(hardened_tree), str(tree)], check=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    installed = subprocess.run(["chroot", str(tree), "sh", "-c", "apt-get update --quiet && apt-get install --yes "
                                f"--quiet --no-install-recommends {KERNEL_PACKAGE}"],
                               env=env, capture_output=True, text=True)
    assert installed.returncode == 0, f"{KERNEL_PACKAGE} did not install in the VM's tree: {installed.stderr[-2000:]}"
    (tree / "usr" / "sbin" / "policy-rc.d").unlink(missing_ok=True)
    shutil.copyfile(AGENT, tree / "usr" / "local" / "sbin" / "tenantry-vm-agent")
    unit = tree / "etc" / "systemd" / "system" / "tenantry-vm-agent.service"
    unit.write_text(AGENT_UNIT)
    wants = tree / "etc" / "systemd" / "system" / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / unit.name).symlink_to(f"/etc/systemd/system/{unit.name}")
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    assert len(kernels) == 1, f"expected one kernel in the VM's tree, found {kernels}"
    initramfs = kernels[0].with_name(kernels[0].name.replace("vmlinuz-", "initrd.img-"))
    assert initramfs.exists(), f"initramfs-tools built no {initramfs.name}"
    return kernels[0], initramfs


def disk(tree: Path, image: Path) -> Path:
    """An ext4 disk holding the tree (mkfs.ext4 copies a folder in, no loop device or mount needed), twice its size
    and sparse."""
    used = int(subprocess.run(["du", "-sb", str(tree)], capture_output=True, text=True, check=True).stdout.split()[0])
    image.unlink(missing_ok=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "tenantry-node", "-d", str(tree), str(image), str(2 * used // 1024)],
                   check=True, capture_output=True)
    return image


class AgentBackend(base.BaseBackend):
    """testinfra's view of the VM: each command goes to the agent on the VM's second serial port and its exit code
    and output come back."""
    NAME = "tenantry-vm"

    def __init__(self, channel: socket.socket, reader, *args: Any, **kwargs: Any) -> None:
        super().__init__("vm", *args, **kwargs)
        self.channel, self.reader = channel, reader
        self.sent = 0

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        text = self.get_command(command, *args)
        self.sent += 1
        self.channel.sendall(json.dumps({"id": self.sent, "command": text}).encode() + b"\n")
        reply = json.loads(self.reader.readline())
        assert reply.get("id") == self.sent, f"the VM's agent answered {reply!r} to command {self.sent}"
        return self.result(reply["rc"], self.encode(text), base64.b64decode(reply["stdout"]),
                           base64.b64decode(reply["stderr"]))


@dataclass
class BootedVM:
    process: subprocess.Popen
    folder: Path
    host: Host
    boot_state: str
    ssh_port: int
    """The test machine's 127.0.0.1 port that reaches the node's SSH port (22) once its network card is up."""

    @property
    def console(self) -> str:
        return (self.folder / "console.log").read_text(errors="replace")

    def stop(self) -> None:
        """The emulator stopped (the disk is thrown away: no shutdown to wait for)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def boot(kernel: Path, initramfs: Path, image: Path, folder: Path) -> BootedVM:
    """The VM booted from the disk with the node's kernel; returned once the agent answers and systemd's start-up has
    ended (running or degraded). Its console (kernel and systemd) goes to console.log in folder.

    It has one network card, on qemu's user network cut off from everything (restrict=on) but for the node's SSH
    port, forwarded from a free port of the test machine's 127.0.0.1: the node configures no address for it, so it
    stays down unless a test brings it up (tests/ansible/test_vm_converge.py)."""
    agent_socket = folder / "agent.sock"
    agent_socket.unlink(missing_ok=True)
    ssh_port = free_port()
    command = ["qemu-system-x86_64", "-accel", "tcg", "-m", str(MEMORY_MB), "-smp", "1", "-display", "none",
               "-monitor", "none", "-no-reboot",
               "-nic", f"user,model=virtio-net-pci,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
               "-kernel", str(kernel), "-initrd", str(initramfs),
               "-append", "root=/dev/vda rw console=ttyS0 panic=-1",
               "-drive", f"file={image},if=virtio,format=raw",
               "-serial", f"file:{folder / 'console.log'}",
               "-serial", f"unix:{agent_socket},server=on,wait=off"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(folder / "qemu.log").open("wb"))
    deadline = time.monotonic() + BOOT_SECONDS
    try:
        backend = AgentBackend(*_agent_channel(agent_socket, process, deadline))
        backend.channel.settimeout(max(deadline - time.monotonic(), 1.0))
        state = Host(backend).run("systemctl is-system-running --wait").stdout.strip()
        backend.channel.settimeout(COMMAND_SECONDS)
    except BaseException:
        process.kill()
        raise
    return BootedVM(process, folder, Host(backend), state, ssh_port)


def _agent_channel(agent_socket: Path, process: subprocess.Popen, deadline: float) -> tuple[socket.socket, Any]:
    """Connected to the agent once it said it is ready (qemu makes the socket at once; the agent speaks once the
    VM has booted far enough to start it)."""
    while not agent_socket.exists():
        assert process.poll() is None, f"qemu exited with {process.returncode} before making {agent_socket}"
        assert time.monotonic() < deadline, f"qemu made no {agent_socket} within {BOOT_SECONDS:.0f} s"
        time.sleep(0.2)
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        channel.connect(str(agent_socket))
    except ConnectionRefusedError:
        process.wait(timeout=10)  # qemu made the socket and ended: what it said is in qemu.log
        raise AssertionError(f"qemu exited with {process.returncode}: "
                             f"{(agent_socket.parent / 'qemu.log').read_text(errors='replace')[-2000:]}") from None
    reader = channel.makefile("rb")
    channel.settimeout(max(deadline - time.monotonic(), 1.0))
    hello = reader.readline()  # everything before the agent starts is the kernel's and systemd's, on the console
    assert hello.strip() == b'{"ready": true}', f"the VM's agent said {hello!r} instead of ready"
    return channel, reader
