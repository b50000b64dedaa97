"""The facts that prove each control of ansible/ on a hardened host, one fact per test case, each carrying its
control's ID. Expected values are stated here outright, as a reviewer reads them in the roles' defaults and the
stack's Plan, never read back from the roles: a changed default must change a test."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from typing import Callable

from testinfra.host import Host


@dataclass(frozen=True)
class Fact:
    control: str
    name: str
    check: Callable[[Host], None]
    live: bool = False  # shown only by a running system (services, loaded rules, the running kernel)

    @property
    def id(self) -> str:
        return f"{self.control}-{self.name}"


def _lines(host: Host, path: str) -> list[str]:
    handle = host.file(path)
    assert handle.exists, f"{path} does not exist"
    return [line.strip() for line in handle.content_string.splitlines()]


def has_line(control: str, name: str, path: str, line: str) -> Fact:
    """The file has this exact line (whitespace at either end aside)."""
    def check(host: Host) -> None:
        assert line in _lines(host, path), f"{path} has no line {line!r}"
    return Fact(control, name, check)


def owned(control: str, path: str, group: str, mode: int, user: str = "root") -> Fact:
    def check(host: Host) -> None:
        handle = host.file(path)
        assert handle.exists, f"{path} does not exist"
        assert (handle.user, handle.group, oct(handle.mode)) == (user, group, oct(mode)), path
    return Fact(control, path.strip("/").replace("/", "."), check)


def absent(control: str, path: str) -> Fact:
    def check(host: Host) -> None:
        assert not host.file(path).exists, f"{path} exists"
    return Fact(control, path.rsplit("/", 1)[-1] + "-absent", check)


def enabled(control: str, service: str) -> Fact:
    def check(host: Host) -> None:
        answer = host.run(f"systemctl is-enabled {service}")
        assert answer.stdout.strip() == "enabled", f"{service}: {answer.stdout.strip() or answer.stderr.strip()}"
    return Fact(control, "enabled", check)


def runs(control: str, service: str) -> Fact:
    def check(host: Host) -> None:
        answer = host.run(f"systemctl is-active {service}")
        assert answer.stdout.strip() == "active", f"{service}: {answer.stdout.strip()}"
    return Fact(control, "runs", check, live=True)


def command(control: str, name: str, text: str, expect: Callable[[str], bool], why: str) -> Fact:
    """The command succeeds on the host and its output satisfies expect."""
    def check(host: Host) -> None:
        output = host.check_output(text)
        assert expect(output), f"{text}: {why}; got {output[:400]!r}"
    return Fact(control, name, check)


SYSCTL_FILE = "/etc/sysctl.d/99-tenantry-hardening.conf"
SYSCTLS = {
    "net.ipv4.conf.all.accept_redirects": 0, "net.ipv4.conf.default.accept_redirects": 0,
    "net.ipv4.conf.all.secure_redirects": 0, "net.ipv4.conf.default.secure_redirects": 0,
    "net.ipv4.conf.all.send_redirects": 0, "net.ipv4.conf.default.send_redirects": 0,
    "net.ipv4.conf.all.accept_source_route": 0, "net.ipv4.conf.default.accept_source_route": 0,
    "net.ipv4.conf.all.log_martians": 1, "net.ipv4.conf.default.log_martians": 1,
    "net.ipv4.icmp_echo_ignore_broadcasts": 1, "net.ipv4.icmp_ignore_bogus_error_responses": 1,
    "net.ipv4.tcp_syncookies": 1,
    "net.ipv6.conf.all.accept_redirects": 0, "net.ipv6.conf.default.accept_redirects": 0,
    "net.ipv6.conf.all.accept_source_route": 0, "net.ipv6.conf.default.accept_source_route": 0,
    "kernel.kptr_restrict": 2, "kernel.dmesg_restrict": 1, "kernel.yama.ptrace_scope": 1,
    "kernel.randomize_va_space": 2, "kernel.sysrq": 0, "kernel.unprivileged_bpf_disabled": 1,
    "net.core.bpf_jit_harden": 1, "vm.mmap_min_addr": 65536,
    "fs.suid_dumpable": 0, "kernel.core_pattern": "|/bin/false", "fs.protected_hardlinks": 1, "fs.protected_symlinks": 1,
    "fs.protected_fifos": 2, "fs.protected_regular": 2,
    # A Kubernetes node with Calico (node.CNI_PROFILE): strict reverse-path filtering (Felix refuses loose), forwarding
    # on, bridged traffic through netfilter.
    "net.ipv4.conf.all.rp_filter": 1, "net.ipv4.conf.default.rp_filter": 1, "net.ipv4.ip_forward": 1,
    "net.bridge.bridge-nf-call-iptables": 1, "net.bridge.bridge-nf-call-ip6tables": 1,
}
USERNS_SYSCTL = {"bookworm": ("kernel.unprivileged_userns_clone", 0), "jammy": ("kernel.unprivileged_userns_clone", 0),
                 "noble": ("kernel.apparmor_restrict_unprivileged_userns", 1)}
HEADERS = {"debian": "linux-headers-amd64", "ubuntu": "linux-headers-generic"}
BLOCKED_MODULES = ("cramfs", "freevxfs", "hfs", "hfsplus", "jffs2", "udf", "usb-storage", "dccp", "sctp", "rds", "tipc")
SENSITIVE_FILES = (("/etc/passwd", "root", 0o644), ("/etc/group", "root", 0o644), ("/etc/shadow", "shadow", 0o640),
                   ("/etc/gshadow", "shadow", 0o640))
AUDITED = ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/sshd_config",
           "/etc/containerd", "/etc/default/kubelet", "/etc/kubernetes", "/var/lib/kubelet/config.yaml",
           "/usr/bin/containerd", "/usr/bin/runc", "/usr/bin/kubelet", "/usr/local/bin/kubelet")
SSHD = {  # sshd -T: the configuration the server actually runs with, lower-case keys
    "permitrootlogin": "no", "pubkeyauthentication": "yes", "authenticationmethods": "publickey",
    "passwordauthentication": "no", "kbdinteractiveauthentication": "no", "permitemptypasswords": "no",
    "hostbasedauthentication": "no", "allowgroups": "ssh-users", "maxauthtries": "3", "logingracetime": "30",
    "clientaliveinterval": "300", "clientalivecountmax": "2", "x11forwarding": "no", "allowtcpforwarding": "no",
    "allowagentforwarding": "no", "permittunnel": "no", "banner": "/etc/issue.net",
    "ciphers": "chacha20-poly1305@openssh.com,aes256-gcm@openssh.com,aes128-gcm@openssh.com,aes256-ctr,aes192-ctr,"
               "aes128-ctr",
    "macs": "hmac-sha2-512-etm@openssh.com,hmac-sha2-256-etm@openssh.com,umac-128-etm@openssh.com",
    "kexalgorithms": "sntrup761x25519-sha512@openssh.com,curve25519-sha256,curve25519-sha256@libssh.org,"
                     "diffie-hellman-group16-sha512,diffie-hellman-group18-sha512,diffie-hellman-group-exchange-sha256",
}
FIREWALL = "/etc/nftables.d/10-tenantry-host.nft"
KUBELET = "/etc/default/kubelet"
POOL_LABELS = "nvidia.com/mig.config=tenantry-1x3g.40gb-2x2g.20gb"  # the pool label is the platform's (gpu_node refuses it)
POOL_TAINT = "tenantry.io/pool=h100-mig:NoSchedule"


def _userns(host: Host) -> None:
    key, value = USERNS_SYSCTL[host.system_info.codename]
    assert f"{key} = {value}" in _lines(host, SYSCTL_FILE), f"{SYSCTL_FILE} has no {key} = {value}"


def _sysctls_in_force(host: Host) -> None:
    userns_key, userns_value = USERNS_SYSCTL[host.system_info.codename]
    wrong = {}
    for key, value in {**SYSCTLS, userns_key: userns_value}.items():
        live = host.run(f"sysctl -n {key}")
        if live.stdout.strip() != str(value):
            wrong[key] = live.stdout.strip() or live.stderr.strip()
    assert not wrong, f"the running kernel differs: {wrong}"


def _modules_loaded(host: Host) -> None:
    """The modules Kubernetes needs, loaded by the boot (modules-load.d), as the kernel lists them."""
    missing = [module for module in ("overlay", "br_netfilter") if not host.file(f"/sys/module/{module}").exists]
    assert not missing, f"not loaded after boot: {missing}"


def _refused(module: str) -> Fact:
    """The node's kernel ships the module, and when something asks for it (as a mount of its file system or a
    socket of its protocol would), modprobe fails and the module stays unloaded."""
    def check(host: Host) -> None:
        shipped = host.run(f"modinfo --field filename {module}")
        assert shipped.rc == 0, f"the node's kernel has no {module} to refuse: {shipped.stderr.strip()}"
        asked = host.run(f"modprobe {module}")
        loaded = host.file(f"/sys/module/{module.replace('-', '_')}").exists
        assert asked.rc != 0 and not loaded, f"modprobe {module}: rc {asked.rc}, loaded {loaded}"
    return Fact("os-04", f"{module}-refused", check, live=True)


def _security_origins_only(host: Host) -> None:
    """unattended-upgrades upgrades from an origin that either list matches: both may name security origins only."""
    dump = host.check_output("apt-config dump Unattended-Upgrade::Origins-Pattern Unattended-Upgrade::Allowed-Origins")
    origins = [line.split('"')[1] for line in dump.splitlines() if re.match(r"Unattended-Upgrade::\S+::", line)]
    assert origins and all("security" in origin for origin in origins), f"origins upgraded: {origins}"


HELD = ("linux-image-amd64", "linux-image-6.1.0-28-amd64", "linux-headers-amd64", "linux-generic",
        "linux-image-6.8.0-49-generic", "linux-modules-6.8.0-49-generic", "nftables", "nvidia-driver",
        "libnvidia-container1", "cuda-drivers")
NOT_HELD = ("openssh-server", "libc6", "openssl", "containerd", "libnftables1", "sudo")
UPGRADES_MATCH = """
import importlib.machinery, json, sys
import apt_pkg
apt_pkg.init_config()
uu = importlib.machinery.SourceFileLoader("uu", "/usr/bin/unattended-upgrade").load_module()
held = apt_pkg.config.value_list("Unattended-Upgrade::Package-Blacklist")
print(json.dumps({name: bool(uu.is_pkgname_in_blacklist(name, held)) for name in sys.argv[1:]}))
"""


def _held(host: Host) -> None:
    """unattended-upgrades' own matcher, fed the node's apt configuration, holds the kernel, the firewall and the GPU
    stack back and lets every other security upgrade through."""
    names = " ".join((*HELD, *NOT_HELD))
    decided = json.loads(host.check_output(f"python3 -c {shlex.quote(UPGRADES_MATCH)} {names}"))
    wrong = {name: held for name, held in decided.items() if held != (name in HELD)}
    assert not wrong, f"held (True) or upgraded (False) against the role's intent: {wrong}"


def _headers(host: Host) -> None:
    package = HEADERS[host.system_info.distribution]
    assert host.package(package).is_installed, f"{package} is not installed"


def _running_kernel_headers(host: Host) -> None:
    release = host.check_output("uname -r")
    assert host.package(f"linux-headers-{release}").is_installed, release


def _sshd(key: str, value: str) -> Fact:
    def check(host: Host) -> None:
        effective = dict(line.split(" ", 1) for line in host.check_output("/usr/sbin/sshd -T").splitlines() if " " in line)
        assert effective.get(key) == value, f"sshd -T: {key} {effective.get(key)!r}, expected {value!r}"
    return Fact("ssh-05", key, check)


def _short_moduli(host: Host) -> None:
    short = [line for line in _lines(host, "/etc/ssh/moduli") if line and not line.startswith("#")
             and int(line.split()[4]) < 3071]
    assert not short, f"{len(short)} moduli under 3071 bits"


def _rsa_bits(host: Host) -> None:
    bits = int(host.check_output("ssh-keygen -l -f /etc/ssh/ssh_host_rsa_key.pub").split()[0])
    assert bits >= 3072, bits


def _systemd_cgroup(host: Host) -> None:
    dump = tomllib.loads(host.check_output("containerd config dump"))
    options = dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]["options"]
    assert options.get("SystemdCgroup") is True, options


def _cni_dirs(host: Host) -> None:
    cni = tomllib.loads(host.check_output("containerd config dump"))["plugins"]["io.containerd.grpc.v1.cri"]["cni"]
    assert (cni["bin_dir"], cni["conf_dir"]) == ("/opt/cni/bin", "/etc/cni/net.d"), cni


def _no_swap_at_boot(host: Host) -> None:
    """No fstab line the boot would turn into a swap unit (the fixture's node had one, as installers write)."""
    active = [line for line in _lines(host, "/etc/fstab") if line and not line.startswith("#")
              and len(line.split()) > 2 and line.split()[2] == "swap"]
    assert not active, f"/etc/fstab still swaps: {active}"


def _swap_off(host: Host) -> None:
    assert host.file("/proc/swaps").content_string.strip().splitlines()[1:] == [], host.file("/proc/swaps").content_string


def _core_limit(control: str, unit: str) -> Fact:
    """The running service's own limit, as the kernel holds it for its main process (what its children inherit)."""
    def check(host: Host) -> None:
        pid = host.check_output(f"systemctl show --property MainPID --value {unit}").strip()
        assert pid not in ("", "0"), f"{unit} has no main process"
        limits = host.file(f"/proc/{pid}/limits").content_string
        line = next(text for text in limits.splitlines() if text.startswith("Max core file size"))
        assert line.split()[4:6] == ["0", "0"], f"{unit}: {line}"
    return Fact(control, f"{unit}-limit-in-force", check, live=True)


def _default_core_limit(host: Host) -> None:
    assert host.check_output("systemctl show --property DefaultLimitCORE --value").strip() == "0"


def _audit_rules_loaded(host: Host) -> None:
    """Every watch is in the kernel's audit rules (auditctl stops loading a file at its first refused rule)."""
    loaded = host.check_output("auditctl -l")
    missing = [path for path in AUDITED if not re.search(rf"^-w {re.escape(path)} -p w?a", loaded, re.M)]
    assert not missing, f"not watched by the kernel: {missing}\n{loaded}"


def _ruleset_loaded(host: Host) -> None:
    chain = host.check_output("nft list chain inet tenantry_host input")
    assert "policy drop;" in chain and "tcp dport 22 ip saddr @admin_v4 accept" in chain, chain


def _kubelet_flag(flag: str, value: str) -> Fact:
    def check(host: Host) -> None:
        line = next((text for text in _lines(host, KUBELET) if text.startswith("KUBELET_EXTRA_ARGS=")), "")
        assert f"{flag}={value}" in line.strip('"').split('"', 1)[-1].split(), f"{KUBELET}: no {flag}={value} in {line}"
    return Fact("gpu-08", flag.strip("-"), check)


FACTS: tuple[Fact, ...] = (
    *(has_line("os-01", key, SYSCTL_FILE, f"{key} = {value}") for key, value in SYSCTLS.items()),
    Fact("os-01", "unprivileged-userns-closed", _userns),
    has_line("os-02", "overlay", "/etc/modules-load.d/90-tenantry-kubernetes.conf", "overlay"),
    has_line("os-02", "br_netfilter", "/etc/modules-load.d/90-tenantry-kubernetes.conf", "br_netfilter"),
    Fact("os-03", "in-force", _sysctls_in_force, live=True),
    *(command("os-04", module, f"modprobe --dry-run --verbose {module}", lambda out: "install /bin/false" in out,
              "modprobe would load it") for module in BLOCKED_MODULES),
    *(owned("os-05", path, group, mode) for path, group, mode in SENSITIVE_FILES),
    has_line("os-06", "no-core", "/etc/security/limits.d/90-tenantry-no-core.conf", "* hard core 0"),
    has_line("os-07", "storage", "/etc/systemd/coredump.conf.d/90-tenantry.conf", "Storage=none"),
    has_line("os-07", "size", "/etc/systemd/coredump.conf.d/90-tenantry.conf", "ProcessSizeMax=0"),
    *(has_line("os-08", key, "/etc/login.defs", f"{key}\t{value}") for key, value in
      {"PASS_MAX_DAYS": 365, "PASS_MIN_DAYS": 1, "PASS_WARN_AGE": 14, "UMASK": "027", "ENCRYPT_METHOD": "YESCRYPT"}.items()),
    has_line("os-09", "minlen", "/etc/security/pwquality.conf", "minlen = 14"),
    has_line("os-10", "deny", "/etc/security/faillock.conf", "deny = 5"),
    has_line("os-10", "unlock-time", "/etc/security/faillock.conf", "unlock_time = 900"),
    command("os-11", "preauth", "grep -E '^auth.*pam_faillock.so.*preauth' /etc/pam.d/common-auth", bool,
            "common-auth does not consult pam_faillock before the password"),
    command("os-11", "authfail", "grep -E '^auth.*pam_faillock.so.*authfail' /etc/pam.d/common-auth", bool,
            "common-auth does not count failures with pam_faillock"),
    *(command("os-12", path.strip("/").replace("/", "."), "cat /etc/audit/rules.d/90-tenantry.rules",
              lambda out, path=path: re.search(rf"^-w {re.escape(path)} -p w?a", out, re.M) is not None,
              f"{path} is not watched") for path in AUDITED),
    enabled("os-13", "auditd"), runs("os-13", "auditd"),
    has_line("os-14", "lists", "/etc/apt/apt.conf.d/20auto-upgrades", 'APT::Periodic::Update-Package-Lists "1";'),
    has_line("os-14", "upgrade", "/etc/apt/apt.conf.d/20auto-upgrades", 'APT::Periodic::Unattended-Upgrade "1";'),
    Fact("os-15", "security-only", _security_origins_only),
    Fact("os-15", "held-for-a-roll", _held),
    command("os-15", "no-reboot", "apt-config dump Unattended-Upgrade::Automatic-Reboot",
            lambda out: 'Unattended-Upgrade::Automatic-Reboot "false";' in out, "upgrades may reboot the node"),
    has_line("os-16", "servers", "/etc/chrony/chrony.conf", "pool 2.debian.pool.ntp.org iburst"),
    enabled("os-17", "chrony"), runs("os-17", "chrony"),
    has_line("os-18", "persistent", "/etc/systemd/journald.conf.d/90-tenantry.conf", "Storage=persistent"),
    has_line("os-18", "compress", "/etc/systemd/journald.conf.d/90-tenantry.conf", "Compress=yes"),
    has_line("os-18", "bounded", "/etc/systemd/journald.conf.d/90-tenantry.conf", "SystemMaxUse=2G"),
    owned("os-19", "/var/log/journal", "systemd-journal", 0o2755),
    Fact("os-22", "no-swap-at-boot", _no_swap_at_boot),
    has_line("os-21", "default-limit", "/etc/systemd/system.conf.d/90-tenantry-no-core.conf", "DefaultLimitCORE=0"),
    Fact("os-21", "default-limit-in-force", _default_core_limit, live=True), _core_limit("os-21", "ssh"),
    *(command("os-20", path.rsplit("/", 1)[-1], f"cat {path}", lambda out: out.startswith("Authorised access only."),
              "no warning") for path in ("/etc/issue", "/etc/issue.net")),
    *(absent("ssh-01", f"/etc/ssh/ssh_host_{key}") for key in ("dsa_key", "ecdsa_key", "ecdsa_key.pub")),
    *(command("ssh-02", kind, f"test -s /etc/ssh/ssh_host_{kind}_key && cat /etc/ssh/ssh_host_{kind}_key.pub",
              lambda out, kind=kind: out.startswith(f"ssh-{kind}"), "no such host key") for kind in ("ed25519", "rsa")),
    Fact("ssh-02", "rsa-3072-bits-or-more", _rsa_bits),
    Fact("ssh-03", "no-short-moduli", _short_moduli),
    command("ssh-04", "ssh-users", "getent group ssh-users", lambda out: out.startswith("ssh-users:"), "no such group"),
    *(_sshd(key, value) for key, value in SSHD.items()),
    enabled("ssh-06", "ssh"), runs("ssh-06", "ssh"),
    command("fw-01", "valid", f"nft --check --file {FIREWALL} && echo valid", lambda out: "valid" in out,
            "nft refuses the rules"),
    enabled("fw-03", "nftables"), runs("fw-03", "nftables"), Fact("fw-03", "loaded", _ruleset_loaded, live=True),
    has_line("gpu-02", "blacklist", "/etc/modprobe.d/90-tenantry-blacklist-nouveau.conf", "blacklist nouveau"),
    has_line("gpu-02", "no-modeset", "/etc/modprobe.d/90-tenantry-blacklist-nouveau.conf", "options nouveau modeset=0"),
    Fact("gpu-03", "headers-metapackage", _headers),
    Fact("gpu-04", "running-kernel-headers", _running_kernel_headers, live=True),
    Fact("gpu-05", "systemd-cgroup", _systemd_cgroup),
    enabled("gpu-06", "containerd"), runs("gpu-06", "containerd"),
    has_line("gpu-10", "containerd-limit", "/etc/systemd/system/containerd.service.d/90-tenantry-no-core.conf",
             "LimitCORE=0"),
    _core_limit("gpu-10", "containerd"),
    Fact("gpu-11", "cni-dirs", _cni_dirs),
    has_line("gpu-07", "iommu-and-hugepages", "/etc/default/grub.d/90-tenantry.cfg",
             'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX intel_iommu=on iommu=pt default_hugepagesz=1G '
             'hugepagesz=1G hugepages=2"'),
    _kubelet_flag("--node-labels", POOL_LABELS),
    _kubelet_flag("--register-with-taints", POOL_TAINT),
    _kubelet_flag("--system-reserved", "cpu=1,memory=4Gi,ephemeral-storage=10Gi"),
    _kubelet_flag("--kube-reserved", "cpu=1,memory=2Gi,ephemeral-storage=5Gi"),
    _kubelet_flag("--eviction-hard", "memory.available<2Gi,nodefs.available<10%,imagefs.available<15%"),
)


NOT_IN_DEBIANS_KERNEL = ("cramfs",)
"""Blocked for kernels that build it (Ubuntu's); Debian 12's 6.1 leaves CONFIG_CRAMFS unset, so there is nothing to
refuse in the VM."""
KERNEL_FACTS: tuple[Fact, ...] = (Fact("os-02", "loaded", _modules_loaded, live=True),
                                  Fact("os-12", "rules-loaded", _audit_rules_loaded, live=True),
                                  Fact("os-22", "swap-off", _swap_off, live=True),
                                  *(_refused(module) for module in BLOCKED_MODULES
                                    if module not in NOT_IN_DEBIANS_KERNEL))
"""What only the node's own kernel shows beyond FACTS' live ones, read in the VM alone
(tests/ansible/test_kernel_live.py): on a chroot or a container these would load into, or be refused by, the test
machine's kernel."""
