"""The spec reference in docs/platform.md, generated from the schema so it cannot drift.

    python -m tenantry.docs          rewrite that section of docs/platform.md (`make docs`)
    python -m tenantry.docs --check  exit 1 if docs/platform.md is out of date (the tests check the same)
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from tenantry.spec import schema

PAGE = Path(__file__).resolve().parent.parent / "docs" / "platform.md"
START, END = "<!-- spec-reference:start -->", "<!-- spec-reference:end -->"

# Reading order: from the top of a stack file down.
SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("top level", schema.Spec),
    ("cluster", schema.ClusterSpec),
    ("cluster.node_pools[]", schema.NodePoolSpec),
    ("cluster.gpu_operator", schema.GpuOperatorSpec),
    ("engines[]", schema.EngineSpec),
    ("engines[].placement", schema.PlacementSpec),
    ("engines[].architecture", schema.ArchitectureSpec),
    ("engines[].throughput", schema.ThroughputOverrideSpec),
    ("engines[].lora", schema.LoraSpec),
    ("engines[].autoscaling", schema.AutoscalingSpec),
    ("engines[].adapters[]", schema.AdapterSpec),
    ("tenants[]", schema.TenantSpec),
    ("tenants[].budget", schema.BudgetSpec),
    ("tenants[].cache", schema.CacheIsolationSpec),
    ("tenants[].slo", schema.SloSpec),
    ("tenants[].typical", schema.TypicalRequestSpec),
    ("tenants[].traffic[]", schema.TrafficShareSpec),
    ("tenants[].namespace_quota", schema.NamespaceQuotaSpec),
    ("tiers", schema.TiersSpec),
    ("tiers.<tier>", schema.TierPolicySpec),
    ("gateway", schema.GatewaySpec),
    ("gateway.fallbacks[]", schema.FallbackSpec),
    ("gateway.admission", schema.AdmissionSpec),
    ("platform", schema.PlatformSpec),
    ("platform.postgres", schema.PostgresSpec),
    ("platform.cloud_identity", schema.CloudIdentitySpec),
    ("platform.model_cache", schema.ModelCacheSpec),
)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        section = next((title for title, model in SECTIONS if model is annotation), None)
        return f"mapping (`{section}`)" if section else "mapping"
    return {str: "text", int: "integer", float: "number", bool: "true/false"}.get(annotation, str(annotation))


def _constraints(field: Any) -> str:
    parts = []
    for meta in field.metadata:
        for attr, symbol in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"), ("min_length", "length ≥"),
                             ("max_length", "length ≤")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{symbol} {value:,}" if isinstance(value, (int, float)) else f"{symbol} {value}")
        pattern = getattr(meta, "pattern", None)
        if pattern == schema.NAME_PATTERN:
            parts.append("a-z, 0-9 and '-', starting with a letter")
        elif pattern:
            parts.append(f"matches `{pattern}`")
    return ", ".join(parts)


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "see below" if not isinstance(field.default_factory(), list) else "`[]`"
    if field.default is PydanticUndefined:
        return "**required**"
    if field.default is None:
        return "—"
    if field.default == "":
        return '`""`'
    return f"`{field.default}`"


def reference() -> str:
    lines = [START, ""]
    for title, model in SECTIONS:
        lines += [f"#### `{title}`", ""]
        if model.__doc__ and model is not schema.Spec:
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| key | type | unit | default | limits | meaning |", "|---|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            lines.append(
                f"| `{field.alias or name}` | {_type_name(field.annotation)} | {extra.get('unit', '')} | "
                f"{_default(field)} | {_constraints(field)} | {field.description or ''} |"
            )
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def rewritten(page: str) -> str:
    before, _, rest = page.partition(START)
    _, _, after = rest.partition(END)
    return before + reference() + after


def main(argv: list[str]) -> int:
    current = PAGE.read_text(encoding="utf-8")
    if START not in current or END not in current:
        print(f"{PAGE} has no {START} ... {END} section", file=sys.stderr)
        return 1
    wanted = rewritten(current)
    if "--check" in argv:
        if wanted != current:
            print("docs/platform.md's spec reference is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
