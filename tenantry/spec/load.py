"""Loading a spec: file -> YAML -> typed Spec -> cross-checked Spec.

Every failure becomes a SpecError listing each problem with its field path,
its line and a reason written for the person who edits the file.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tenantry.findings import Finding, Loc, SpecError, file_finding, path_str
from tenantry.spec.references import check_references, suggest
from tenantry.spec.schema import (
    KUBERNETES_VERSION_PATTERN,
    NAME_PATTERN,
    OBJECT_STORE_PATTERN,
    SIX_FIELD_CRON_PATTERN,
    SOURCE_PATTERN,
    WINDOW_PATTERN,
    Spec,
)
from tenantry.spec.yamlsource import YamlDocument, YamlProblem, collector_paused, parse_yaml

STACK_NAME = re.compile(NAME_PATTERN)
MAX_SPEC_BYTES = 50 * 1024 * 1024

PATTERN_MEANINGS = {
    NAME_PATTERN: "a valid name: use lowercase letters, digits and '-', start with a letter, end with a letter or digit",
    KUBERNETES_VERSION_PATTERN: "a Kubernetes version tenantry can validate (1.25 to 1.37, quoted)",
    WINDOW_PATTERN: "a budget window: write a number and s, m, h, d, w or mo (30d, 1mo, 12h)",
    SOURCE_PATTERN: "a source URI (hf://, s3://, gs://, pvc:// or local://)",
    OBJECT_STORE_PATTERN: "an object store location (s3://bucket/path or gs://bucket/path)",
    SIX_FIELD_CRON_PATTERN: "a six-field cron schedule with seconds first (0 0 3 * * *)",
}

# Items whose name helps someone find the entry a path points at.
_NAMED_LISTS = {"tenants": "tenant", "engines": "engine", "node_pools": "pool", "adapters": "adapter"}


def stack_name_of(path: Path) -> str:
    return path.stem


def load_spec(path: str | Path) -> Spec:
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise SpecError(source, [file_finding(f"no such file: {path}")])
    if path.is_dir():
        raise SpecError(source, [file_finding(f"{path} is a directory; give a stack file such as stacks/local.yaml")])
    stack = stack_name_of(path)
    if not STACK_NAME.match(stack) or len(stack) > 50:
        raise SpecError(
            source, [file_finding(f"stack name '{stack}' (from the file name) must be lowercase letters, digits and '-'")]
        )
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise SpecError(source, [file_finding(f"{path} is larger than {MAX_SPEC_BYTES // 2**20} MiB; is it a spec?")])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(source, [file_finding(f"not UTF-8 text (byte {exc.start})")]) from None
    except OSError as exc:
        raise SpecError(source, [file_finding(f"cannot read {path}: {exc.strerror}")]) from None
    return load_spec_text(text, source=source)


def load_spec_text(text: str, source: str = "<spec>") -> Spec:
    with collector_paused():
        return _load(text, source)


def _load(text: str, source: str) -> Spec:
    try:
        doc = parse_yaml(text)
    except YamlProblem as problem:
        raise SpecError(source, [problem.finding]) from None
    if not isinstance(doc.data, dict):
        kind = type(doc.data).__name__ if doc.data is not None else "nothing"
        raise SpecError(
            source, [file_finding(f"a spec is a mapping of keys (cluster, engines, tenants, ...), got {kind}", line=1)]
        )
    try:
        spec = Spec.model_validate(doc.data)
    except ValidationError as exc:
        raise SpecError(source, [_finding(error, doc) for error in exc.errors()]) from None
    problems = check_references(spec)
    if problems:
        raise SpecError(source, [_located(loc, message, doc) for loc, message in problems])
    return spec


# --- turning problems into findings ----------------------------------------------------------


def _located(loc: Loc, message: str, doc: YamlDocument) -> Finding:
    return Finding(path=path_str(loc), message=message + _named_context(loc, doc.data), line=doc.line(loc))


def _named_context(loc: Loc, data: Any) -> str:
    """' (tenant legal-rag)' for a path inside tenants[2], so a reader can find the entry."""
    labels = []
    node, previous = data, None
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(part, int) and previous in _NAMED_LISTS and isinstance(node, dict):
            name = node.get("name")
            if isinstance(name, str):
                labels.append(f"{_NAMED_LISTS[previous]} {name}")
        previous = part
    return f" ({', '.join(labels)})" if labels else ""


def _finding(error: Any, doc: YamlDocument) -> Finding:
    loc: Loc = tuple(error["loc"])
    kind: str = error["type"]
    message = _message(error, kind, loc)
    return _located(loc, message, doc)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: Any, kind: str, loc: Loc) -> str:
    given = error.get("input")
    msg: str = error["msg"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = suggest(str(loc[-1]), allowed) if allowed else ""
        listing = f"; allowed here: {', '.join(allowed)}" if allowed else ""
        return f"unknown key {str(loc[-1])!r}{hint}{listing}"
    if kind == "missing":
        return "required, but missing"
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        explained = PATTERN_MEANINGS.get(pattern)
        if explained:
            return f"{_shown(given)} is not {explained}"
        return f"{_shown(given)} does not match the pattern {pattern}"
    if kind == "string_type" and isinstance(given, (int, float)) and not isinstance(given, bool):
        return f"must be text, got the number {given!r}; quote it (YAML reads 1.30 as the number 1.3)"
    if kind in ("int_type", "float_type") and isinstance(given, str) and _looks_numeric(given):
        return (f"must be a number, got the text {_shown(given)}; write it unquoted and in full "
                "(YAML reads 1e6 as text: write 1000000)")
    if kind == "int_type" and isinstance(given, float):
        return f"must be a whole number, got {given!r}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"must be one of {expected}, got {_shown(given)}"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys, got {_shown(given)}"
    if kind == "list_type":
        return f"must be a list, got {_shown(given)}"
    text = msg.replace("Input should be", "must be").replace("Value should", "must")
    if text.startswith("String should"):
        text = "must" + text.removeprefix("String should")
    if text.startswith("List should"):
        text = "must" + text.removeprefix("List should").replace(" after validation", "")
    if given is not None and not isinstance(given, (dict, list)):
        text += f", got {_shown(given)}"
    return text


def _looks_numeric(text: str) -> bool:
    try:
        float(text.replace("_", ""))
    except ValueError:
        return False
    return True


def _allowed_keys(loc: Loc) -> list[str]:
    model: type[BaseModel] | None = Spec
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = next((f for name, f in model.model_fields.items() if (f.alias or name) == part), None)
        if field is None:
            return []
        model = _model_in(field.annotation)
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside list[X], X | None, Annotated[X, ...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
