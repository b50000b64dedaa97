"""Where the local stack keeps things and which ports it listens on.

Everything lives under one directory (.local/ by default, or
TENANTRY_LOCAL_DIR); models are built once into a shared cache. Every server
listens on 127.0.0.1 only, on ports counted from a base (18100 by default,
or TENANTRY_LOCAL_PORT_BASE), so two stacks (a developer's and the tests')
can run side by side.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
from dataclasses import asdict, dataclass
from pathlib import Path

from tenantry.plan.model import Plan

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_DIR = REPO / ".local"
DEFAULT_PORT_BASE = 18100
HOST = "127.0.0.1"
VLLM_VENV = Path(os.environ.get("TENANTRY_VLLM_VENV", REPO / ".venv-vllm"))
POSTGRES_USER = "postgres"
"""Who runs PostgreSQL when tenantry runs as root (PostgreSQL refuses root)."""
SIDE_GATEWAY_OFFSET = 94
"""The side gateways (the gate's --side-by-side) listen at the port base + this, + this + 1."""
SIDE_GATEWAYS = ("gateway-policy", "gateway-plain")
"""Their process names, in port order: the one with the tenant-policy plugin, the one without."""
ALERTMANAGER_OFFSET = 4
"""Alertmanager listens at the port base + this: below the further gateway replicas (+5 on)."""
ALERT_RECEIVER_OFFSET = 93
"""The webhook receiver listens at the port base + this: just below the side gateways."""


def engine_process(engine: str) -> str:
    """An engine's process name: its supervisord program, its log file, its row in `status`."""
    return f"engine-{engine}"


def gateway_process(replica: int) -> str:
    return f"gateway-{replica}"


@dataclass(frozen=True)
class Ports:
    gateways: list[int]
    """One per gateway replica: the spec's gateway.replicas LiteLLM processes share Redis and PostgreSQL."""
    postgres: int
    redis: int
    prometheus: int
    alertmanager: int
    alert_receiver: int
    engines: dict[str, int]

    @property
    def gateway(self) -> int:
        return self.gateways[0]

    def by_process(self) -> dict[str, int]:
        """The one map of process name to port: preflight, the saved State and `status` read it."""
        return {**{gateway_process(i): p for i, p in enumerate(self.gateways)}, "postgres": self.postgres,
                "redis": self.redis, "prometheus": self.prometheus, "alertmanager": self.alertmanager,
                "alert-receiver": self.alert_receiver, **{engine_process(n): p for n, p in self.engines.items()}}


@dataclass(frozen=True)
class Layout:
    root: Path
    port_base: int

    @classmethod
    def from_environment(cls, root: str | Path | None = None, port_base: int | None = None) -> Layout:
        directory = Path(root or os.environ.get("TENANTRY_LOCAL_DIR") or DEFAULT_DIR).resolve()
        base = port_base or int(os.environ.get("TENANTRY_LOCAL_PORT_BASE", DEFAULT_PORT_BASE))
        return cls(directory, base)

    def ports(self, plan: Plan) -> Ports:
        """Fixed offsets from the base: gateway replicas at +0, +5..+9; engines in
        spec order from +10; Alertmanager and its receiver at their offsets."""
        return Ports(
            gateways=[self.port_base] + [self.port_base + 4 + i for i in range(1, plan.gateway.replicas)],
            postgres=self.port_base + 1,
            redis=self.port_base + 2,
            prometheus=self.port_base + 3,
            alertmanager=self.port_base + ALERTMANAGER_OFFSET,
            alert_receiver=self.port_base + ALERT_RECEIVER_OFFSET,
            engines={e.name: self.port_base + 10 + i for i, e in enumerate(plan.engines)},
        )

    def side_gateway_ports(self) -> dict[str, int]:
        """The side gateways' ports, clear of the stack's own (engines count up from +10)."""
        return {name: self.port_base + SIDE_GATEWAY_OFFSET + i for i, name in enumerate(SIDE_GATEWAYS)}

    @property
    def models(self) -> Path:
        # Shared by every local directory: a model is the same whichever stack runs it.
        return Path(os.environ.get("TENANTRY_MODEL_CACHE", DEFAULT_DIR / "models"))

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def postgres_home(self) -> Path:
        """PostgreSQL's folder: its data (data/) and its socket. As root, PostgreSQL
        runs as the postgres user, who cannot enter a stack directory below a 0700 folder (root's home,
        `mktemp -d`): its files then live in that user's own home, in a folder
        named after the stack directory, so each stack still has its own."""
        if os.geteuid() != 0:
            return self.root / "postgres"
        try:
            home = Path(pwd.getpwnam(POSTGRES_USER).pw_dir)
        except KeyError:  # PostgreSQL is not installed yet (preflight says so): Debian's home for the user
            home = Path("/var/lib/postgresql")
        return home / "tenantry" / hashlib.sha256(str(self.root).encode()).hexdigest()[:16]

    @property
    def postgres_data(self) -> Path:
        return self.postgres_home / "data"

    @property
    def gateway(self) -> Path:
        return self.root / "gateway"

    @property
    def prometheus(self) -> Path:
        return self.root / "prometheus"

    @property
    def alertmanager(self) -> Path:
        return self.root / "alertmanager"

    @property
    def alerts_received(self) -> Path:
        """Every notification Alertmanager delivered, one JSON line each (tenantry/local/alert_receiver.py)."""
        return self.root / "alerts" / "received.jsonl"

    @property
    def redis(self) -> Path:
        return self.root / "redis"

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    @property
    def keys_file(self) -> Path:
        return self.root / "keys.json"

    @property
    def supervisor_conf(self) -> Path:
        return self.root / "supervisord.conf"

    @property
    def supervisor_pid(self) -> Path:
        return self.run / "supervisord.pid"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"


@dataclass(frozen=True)
class State:
    """What `local up` started, for `status`, `down` and `logs`."""

    stack: str
    spec: str
    port_base: int
    ports: dict[str, int]
    gateway_digest: str = ""
    """Digest of the gateway's config and environment: restart it only when this changes."""

    def save(self, layout: Layout) -> None:
        layout.state_file.write_text(json.dumps(asdict(self), indent=2, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, layout: Layout) -> State | None:
        if not layout.state_file.exists():
            return None
        return cls(**json.loads(layout.state_file.read_text(encoding="utf-8")))
