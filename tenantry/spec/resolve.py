"""What the spec leaves to defaults: an engine's model (catalog entry or explicit
architecture) and context, a tenant's cache salt.

Shared by validation (which must know the shape to check TP and context, and
that no two tenants share a salt by accident) and the planner (which computes
with them), so both read the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.catalog.models import Architecture, catalog_model
from tenantry.spec.schema import EngineSpec, TenantSpec

DEFAULT_MAX_CONTEXT = 8192
"""Serving the full 128K context of a Llama 3.1 by default would leave room for
a handful of sequences; 8K is what most chat and RAG traffic needs."""


@dataclass(frozen=True, kw_only=True)
class ResolvedModel:
    name: str
    architecture: Architecture
    revision: str
    source: str


def resolve_model(engine: EngineSpec) -> ResolvedModel | None:
    """None when the model is neither in the catalog nor described (a spec error)."""
    if engine.architecture is not None:
        if engine.revision is None or engine.source is None:
            return None
        arch = Architecture(**engine.architecture.model_dump())
        return ResolvedModel(name=engine.model, architecture=arch, revision=engine.revision, source=engine.source)
    entry = catalog_model(engine.model)
    if entry is None or (engine.revision or entry.revision) is None:
        return None
    return ResolvedModel(
        name=entry.name,
        architecture=entry.architecture,
        revision=engine.revision or entry.revision or "",
        source=engine.source or entry.source,
    )


def engine_max_context(engine: EngineSpec, arch: Architecture) -> int:
    return engine.max_context if engine.max_context is not None else min(DEFAULT_MAX_CONTEXT, arch.max_context)


def group_cache_salt(group: str) -> str:
    return f"group-{group}"


def cache_salt(tenant: TenantSpec) -> str | None:
    """The salt the gateway puts on the tenant's requests: its own (tenant-<name> by default),
    its shared group's, or none for the common, unsalted cache."""
    if tenant.cache.isolation == "own":
        return tenant.cache.salt or f"tenant-{tenant.name}"
    if tenant.cache.isolation == "shared":
        assert tenant.cache.group is not None, "validated by CacheIsolationSpec"
        return group_cache_salt(tenant.cache.group)
    return None
