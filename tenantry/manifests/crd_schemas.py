"""Custom resources against the CRD schemas of the pinned releases, kept beside their chart pins
(charts/<name>/crds/*.yaml) or, for those tenantry applies itself, under crds/<project>/ (each with its source): a field the pinned CRD does not define, a wrong
type or a missing required field is a problem, as Kubernetes' strict field validation would make it."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from tenantry.pins import APPLIED_CRDS_DIR, CHARTS_DIR, crd_file


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields refused wherever it lists its properties and does not keep unknown
    ones (x-kubernetes-preserve-unknown-fields): the API server prunes or, strictly, refuses them."""
    schema = dict(schema)
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    for key in ("properties", "patternProperties"):
        if key in schema:
            schema[key] = {name: _strict(sub) for name, sub in schema[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            schema[key] = _strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            schema[key] = [_strict(sub) for sub in schema[key]]
    return schema


@cache
def pinned_crd_schemas(charts: Path = CHARTS_DIR, applied: Path = APPLIED_CRDS_DIR) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the served version's openAPIV3Schema, strict, for every pinned CRD."""
    schemas = {}
    for path in [*sorted(charts.glob("*/crds/*.yaml")), *sorted(applied.glob("*/*.yaml"))]:
        crd = copy.deepcopy(crd_file(path))  # _strict rewrites the schema in place: never the shared parse
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schemas[(f"{group}/{version['name']}", kind)] = _strict(version["schema"]["openAPIV3Schema"])
    return schemas


SERVER_OWN = ("apiVersion", "kind", "metadata")


def crd_problems(obj: dict[str, Any], where: str, schema: dict[str, Any]) -> list[str]:
    """Each place `obj` breaks its pinned CRD's schema. apiVersion, kind and metadata are the API server's own
    (TypeMeta, ObjectMeta), not the CRD's: they are left out, as some CRDs leave them (Istio's)."""
    body = {key: value for key, value in obj.items() if key not in SERVER_OWN}
    validator = jsonschema.Draft7Validator({
        **schema,
        "properties": {key: value for key, value in schema.get("properties", {}).items() if key not in SERVER_OWN},
        "required": [key for key in schema.get("required", []) if key not in SERVER_OWN],
    })
    return [f"{where}: {'.'.join(str(p) for p in error.absolute_path) or '(object)'}: {error.message}"
            for error in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))]
