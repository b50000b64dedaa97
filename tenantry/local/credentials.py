"""The local stack's secrets (master key, database and Redis passwords), the
tenants' keys, and the environment that carries them to every gateway.
Each is made once, kept in the stack's directory, readable by this user only."""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING

from tenantry.configs.litellm import GATEWAY_ENVIRONMENT
from tenantry.local.layout import HOST, Layout, Ports
from tenantry.plan.model import Plan

if TYPE_CHECKING:
    from tenantry.local.prisma import BridgePaths


def secret(layout: Layout, name: str, prefix: str = "") -> str:
    layout.secrets.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = layout.secrets / name
    if not path.exists():
        path.write_text(prefix + secrets.token_hex(24), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def master_key(layout: Layout) -> str:
    return secret(layout, "master-key", prefix="sk-")


def postgres_password(layout: Layout) -> str:
    return secret(layout, "postgres-password")


def redis_password(layout: Layout) -> str:
    return secret(layout, "redis-password")


def tenant_keys(layout: Layout, plan: Plan) -> dict[str, str]:
    """One key per tenant, made once and kept."""
    existing = json.loads(layout.keys_file.read_text()) if layout.keys_file.exists() else {}
    keys = {t.name: existing.get(t.name) or f"sk-{secrets.token_urlsafe(24)}" for t in plan.tenants}
    layout.keys_file.write_text(json.dumps(keys, indent=2, sort_keys=True), encoding="utf-8")
    layout.keys_file.chmod(0o600)
    return keys


def database_url(layout: Layout, postgres_port: int) -> str:
    """LiteLLM's database on the local stack, as its gateways (and showback, and the gate) reach it."""
    return f"postgresql://litellm:{postgres_password(layout)}@{HOST}:{postgres_port}/litellm"


def gateway_environment(layout: Layout, ports: Ports, prisma_paths: BridgePaths) -> dict[str, str]:
    """What every LiteLLM process of the stack runs with: the stack's secrets,
    its database and Redis, the tenant-policy settings and the Prisma bridge."""
    from tenantry.local import prisma

    return {
        "LITELLM_MASTER_KEY": master_key(layout),
        "DATABASE_URL": database_url(layout, ports.postgres),
        "REDIS_HOST": HOST,
        "REDIS_PORT": str(ports.redis),
        "REDIS_PASSWORD": redis_password(layout),
        **GATEWAY_ENVIRONMENT,
        "TENANTRY_POLICY_FILE": str(layout.gateway / "tenant-policy.json"),
        "HOME": str(layout.root),
        **prisma.environment(prisma_paths),
    }
