"""What the gate runs against: a Target gives the gateways' URLs and the
tenants' keys, stops an engine when a scenario asks, restores stopped engines,
and is closed when the gate is done with it.

The gate knows no more of a target than this, so it runs the same against the
local stack (tenantry/local/target.py: supervisord, side gateways) and against
any deployed gateway (RemoteTarget here: a URL, a keys file and an optional
stop command).

Faults (stopping an engine, killing a gateway replica, stopping PostgreSQL
for a while, ...) happen inside Locust, in another process: a target hands the
gate a shell command per fault (fault_commands, with {engine} and {replica}
placeholders), which the gate writes to the run's run.json and the locustfile
runs when a scenario's stage starts with that fault. A target without a
command for a fault cannot run the scenarios that need it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tenantry.plan.model import Plan

Echo = Callable[[str], None]


class GateError(Exception):
    """The gate cannot run as asked; the message says what to do."""


class Target(Protocol):
    label: str
    """What the verdict table and the report call this run."""
    slug: str
    """Its folder below the gate's output when the gate runs several targets side by side."""
    gateways: list[str]
    """The gateways' base URLs; Locust users spread over them."""
    keys_file: Path
    """A JSON object of tenant name to key (Locust reads it from this file)."""
    fault_commands: dict[str, str]
    """A shell command per fault it can do and per undoing (tenantry.gate.scenarios.FAULTS, RESTORES), with
    {engine}, {replica} or {tenant} where the fault names one."""
    database_url: str | None
    """LiteLLM's PostgreSQL, where the run's spend is reconciled; None: it is not."""

    @property
    def engine_metrics(self) -> dict[str, list[str]]:
        """Each engine's replicas' /metrics, where the gate can reach them; empty when it cannot."""
        ...

    def restore_engines(self, echo: Echo) -> None:
        """Start again any engine a scenario stopped, and wait until it serves."""

    def lost(self) -> str | None:
        """Why the target's gateway stopped during the run, or None while it runs."""

    def close(self) -> None:
        """Release what the target started; called once the gate is done with it."""


def read_keys(target: Target) -> dict[str, str]:
    return json.loads(target.keys_file.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class RemoteTarget:
    """A deployed gateway: the gate starts nothing there and restores nothing
    (an engine stopped by --stop-engine comes back as its platform brings it back)."""

    gateways: list[str]
    keys_file: Path
    fault_commands: dict[str, str] = field(default_factory=dict)
    database_url: str | None = None
    label: str = "gateway"
    slug: str = "gateway"

    @property
    def engine_metrics(self) -> dict[str, list[str]]:
        return {}  # the engines are behind the gateway

    def restore_engines(self, echo: Echo) -> None:
        return None

    def lost(self) -> str | None:
        return None

    def close(self) -> None:
        return None


def remote_target(gateway: str, keys: Path, plan: Plan, fault_commands: dict[str, str],
                  database_url: str | None = None) -> RemoteTarget:
    if not keys.exists():
        raise GateError(f"--keys {keys}: no such file (a JSON object of tenant name to key)")
    try:
        keyed = json.loads(keys.read_text(encoding="utf-8"))
    except ValueError as error:
        raise GateError(f"--keys {keys}: not JSON ({error})") from None
    missing = [t.name for t in plan.tenants if not isinstance(keyed, dict) or t.name not in keyed]
    if missing:
        raise GateError(f"--keys {keys}: no key for tenant(s) {', '.join(missing)}")
    if not gateway.startswith(("http://", "https://")):
        raise GateError(f"--gateway {gateway}: give a URL such as https://gateway.example.com")
    return RemoteTarget([gateway.rstrip("/")], keys, dict(fault_commands or {}), database_url)


FAULT_COMMAND_SECONDS = 300
"""A fault's command may take long: the local stack's budget command waits up to 240 s for a gateway
replica that is restarting (tenantry.local.budget.REPLICA_BACK_SECONDS)."""


def run_fault_command(command: str, subject: str) -> str:
    """Run a fault's (or restore's) command for its subject; what it did, as the run's actions record it."""
    argv = shlex.split(command.format(engine=subject, replica=subject, tenant=subject))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=FAULT_COMMAND_SECONDS)
    except subprocess.TimeoutExpired:
        return f"timed out after {FAULT_COMMAND_SECONDS} s"
    return f"exit {done.returncode} {(done.stdout + done.stderr).strip()[:200]}"
