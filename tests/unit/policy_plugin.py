"""What the tenant-policy plugin's tests share: its modules, reached by the
names the plugin itself imports them by (docs/decisions.md: The plugin's
modules load as neighbours), the plugin's settings for the local stack, one
event loop and a real Redis."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tenantry.configs.litellm import tenant_policy_settings
from tenantry.gateway import tenant_policy as plugin  # before its neighbours: it puts its folder on sys.path
from tenantry.stacks import plan_stack

import tenant_policy_contract as contract  # found through the folder the plugin added to sys.path
import tenant_policy_decision as decision
import tenant_policy_engine_metrics as engine_metrics
import tenant_policy_errors as errors
import tenant_policy_front_door as front_door
import tenant_policy_ledger as ledger
import tenant_policy_metrics as metrics
import tenant_policy_outcomes as outcomes
import tenant_policy_request as request
import tenant_policy_settings as settings

__all__ = ["contract", "decision", "engine_metrics", "errors", "failsafe", "front_door", "key", "ledger", "local_settings",
           "metrics", "outcomes", "plugin", "redis_server", "request", "run", "settings"]

LOOP = asyncio.new_event_loop()  # one loop: Redis connections belong to the loop that opened them


def run(coro):  # noqa: ANN001, ANN201
    return LOOP.run_until_complete(coro)


def local_settings() -> settings.PolicySettings:
    """The settings the local stack's gateway reads, typed as the plugin reads them."""
    return settings.parse_settings(tenant_policy_settings(plan_stack("local")))


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A Redis of its own on a free port; its URL."""
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is missing: run `make test` (it installs Debian's redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def key(team: str):  # noqa: ANN201 - LiteLLM's UserAPIKeyAuth
    """The authenticated key of a tenant's team, as LiteLLM hands it to the hook."""
    from litellm.proxy._types import UserAPIKeyAuth

    return UserAPIKeyAuth(team_alias=team, team_id=f"id-{team}")


def failsafe(engine: str, tier: str, cause: str) -> float:
    return plugin.FAILSAFE.labels(engine=engine, tier=tier, cause=cause)._value.get()


def shed(tenant: str, tier: str, reason: str) -> float:
    """Requests the platform refused for capacity, as the plugin counts them (the page of TenantGuaranteedThrottled)."""
    return plugin.SHED.labels(tenant=tenant, tier=tier, reason=reason)._value.get()


def seen(running, waiting, kv_usage, *, at, replicas=1):  # noqa: ANN001, ANN201
    """An engine state sampled, and fetched, at `at`."""
    return engine_metrics.EngineState(running=running, waiting=waiting, kv_usage=kv_usage, replicas=replicas,
                                      sampled_at=at, fetched_at=at)


def release_once_full_and_ask(policy, admitted: list[dict]) -> dict:  # noqa: ANN001 - the plugin's instance
    """globex asks once more; the first of its admitted requests ends (its logging event) as soon as the ask has
    found the limit full, not after a guess at how long that takes."""
    real_decide = policy._decide

    async def both():
        found_full = asyncio.Event()

        async def decide(*args, **kwargs):
            made = await real_decide(*args, **kwargs)
            if made[0].reason == "concurrency":
                found_full.set()
            return made

        async def release():
            await found_full.wait()
            await policy.async_log_success_event({"litellm_params": {"metadata": admitted[0]["metadata"]}}, None, 0, 0)

        policy._decide = decide
        releasing = asyncio.ensure_future(release())
        try:
            return await policy.async_pre_call_hook(key("globex"), None, {"model": "micro", "prompt": "x"}, "atext_completion")
        finally:
            await asyncio.wait_for(releasing, 60)
            policy._decide = real_decide

    return run(both())
