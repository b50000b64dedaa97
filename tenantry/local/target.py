"""The local stack as the gate's Target (tenantry/gate/target.py): its own
gateways, or for --side-by-side two side gateways started beside them, one
with the tenant-policy plugin and one without. Engines are stopped and
started through supervisord; a target closes the side gateway it started."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tenantry.local.budget import budget_commands
from tenantry.local.health import LocalStackError, port_open
from tenantry.local.layout import HOST, Layout, State
from tenantry.local.side_gateways import side_gateway_lost, start_side_gateway, stop_side_gateway, wait_side_gateway
from tenantry.local.supervisor import fault_commands, restart_engine_if_stopped, supervisor_running
from tenantry.plan.model import Plan

SIDES = {"gateway-policy": ("tenantry policy", "policy-on", True),
         "gateway-plain": ("plain LiteLLM (no policy, FCFS)", "policy-off", False)}
"""Each side gateway's label, folder and whether it loads the plugin, by process name."""


@dataclass
class LocalTarget:
    layout: Layout
    plan: Plan
    label: str
    slug: str
    gateways: list[str]
    keys_file: Path
    fault_commands: dict[str, str]
    database_url: str | None
    side_gateway: tuple[str, subprocess.Popen] | None = None
    """The side gateway this target started (its process name and process), stopped by close()."""

    @property
    def engine_metrics(self) -> dict[str, list[str]]:
        """Each engine's /metrics (one replica each locally), which the gate samples while it runs."""
        ports = self.layout.ports(self.plan).engines
        return {name: [f"http://{HOST}:{port}/metrics"] for name, port in ports.items()}

    def restore_engines(self, echo: Callable[[str], None]) -> None:
        for engine in self.plan.engines:
            if restart_engine_if_stopped(self.layout, self.plan, engine.name):
                echo(f"engine {engine.name} started again and healthy")

    def lost(self) -> str | None:
        return side_gateway_lost(self.layout, *self.side_gateway) if self.side_gateway else None

    def close(self) -> None:
        if self.side_gateway:
            stop_side_gateway(self.side_gateway[1])
            self.side_gateway = None


def _fault_commands(layout: Layout) -> dict[str, str]:
    """Faults through supervisord, and the budget's through the gateways."""
    return fault_commands(layout) | budget_commands(layout)


def _require_stack(layout: Layout, stack_file: Path) -> None:
    state = State.load(layout)
    if state is None or supervisor_running(layout) is None:
        raise LocalStackError(f"no local stack runs from {layout.root}: start it with `tenantry local up {stack_file}`, "
                              "or point the gate at a gateway with --gateway URL --keys FILE")
    if Path(state.spec).resolve() != stack_file.resolve():
        raise LocalStackError(f"the local stack in {layout.root} runs {state.spec}, not {stack_file}: start that one "
                              f"with `tenantry local up {stack_file}`, or use --dir")


def _database_url(layout: Layout, plan: Plan) -> str:
    from tenantry.local.credentials import database_url

    return database_url(layout, layout.ports(plan).postgres)


def local_target(layout: Layout, plan: Plan, stack_file: Path) -> LocalTarget:
    """The running local stack's own gateways."""
    _require_stack(layout, stack_file)
    urls = [f"http://{HOST}:{port}" for port in layout.ports(plan).gateways]
    return LocalTarget(layout, plan, "tenantry policy", "local", urls, layout.keys_file, _fault_commands(layout),
                       _database_url(layout, plan))


def side_target(layout: Layout, plan: Plan, name: str, port: int, label: str, slug: str, plugin: bool,
                policy: dict | None = None) -> LocalTarget:
    """A side gateway started beside the running stack (its process called `name`), as a target; the caller
    waits for it (wait_side_gateway) and closes it. `policy` replaces the plugin's settings for it alone."""
    process = start_side_gateway(layout, layout.ports(plan), name, port, plugin=plugin, policy=policy)
    return LocalTarget(layout, plan, label, slug, [f"http://{HOST}:{port}"], layout.keys_file, _fault_commands(layout),
                       _database_url(layout, plan), (name, process))


def side_by_side_targets(layout: Layout, plan: Plan, stack_file: Path) -> list[LocalTarget]:
    """Two side gateways beside the running stack, policy first, each healthy
    (docs/decisions.md: Side-by-side compares two side gateways)."""
    _require_stack(layout, stack_file)
    targets: list[LocalTarget] = []
    try:
        for name, port in layout.side_gateway_ports().items():
            if port_open(port):
                raise LocalStackError(f"port {port} (a gateway of --side-by-side) is in use; free it or use "
                                      "--port-base")
            label, slug, plugin = SIDES[name]
            targets.append(side_target(layout, plan, name, port, label, slug, plugin))
        for target in targets:
            wait_side_gateway(layout, target.side_gateway[0], target.gateways[0], target.side_gateway[1])
    except BaseException:  # a gateway started before the failure is ours to stop
        for target in targets:
            target.close()
        raise
    return targets
