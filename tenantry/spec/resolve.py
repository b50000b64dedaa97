"""Resolving an engine's model: catalog entry or explicit architecture.

Shared by validation (which must know the shape to check TP and context) and
the planner (which computes with it), so both read the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.catalog.models import Architecture, catalog_model
from tenantry.spec.schema import EngineSpec

DEFAULT_MAX_CONTEXT = 8192
"""Serving the full 128K context of a Llama 3.1 by default would leave room for
a handful of sequences; 8K is what most chat and RAG traffic needs."""


@dataclass(frozen=True)
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
        return ResolvedModel(engine.model, arch, engine.revision, engine.source)
    entry = catalog_model(engine.model)
    if entry is None:
        return None
    return ResolvedModel(
        entry.name,
        entry.architecture,
        engine.revision or entry.revision,
        engine.source or entry.source,
    )


def engine_max_context(engine: EngineSpec, arch: Architecture) -> int:
    return engine.max_context if engine.max_context is not None else min(DEFAULT_MAX_CONTEXT, arch.max_context)
