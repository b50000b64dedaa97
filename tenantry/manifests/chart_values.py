"""Helm Releases' values against the chart's own values.schema.json, where the pinned release ships one
(charts/<name>/values.schema.json; chart.yaml names the commit it was taken from). Helm validates the values
it installs against that schema and refuses the release; tenantry finds the same problems when it renders,
naming the release and the value.

Helm validates the chart's defaults coalesced with the values given. No pinned schema requires a key
(tests/manifests/test_chart_values.py keeps it so), and coalescing never drops a value given, so the errors
in tenantry's values are the errors Helm would report."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema

from tenantry.manifests.offline import Recorded, Secret
from tenantry.pins import CHARTS_DIR, pinned_chart_of

SCHEMA_FILE = "values.schema.json"


@cache
def values_schema(folder: str) -> dict[str, Any] | None:
    """The pinned chart's own values schema (its folder under charts/), or None where the release ships none."""
    path = CHARTS_DIR / folder / SCHEMA_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _revealed(value: Any) -> Any:
    """Values as Helm receives them: a secret is its value (the mock runtime's stand-in)."""
    if isinstance(value, Secret):
        return _revealed(value.value)
    if isinstance(value, dict):
        return {key: _revealed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_revealed(item) for item in value]
    return value


def chart_values_problems(releases: list[Recorded]) -> list[str]:
    """Each place a Release's values break its chart's schema. A chart that is not pinned is
    policies.versions_are_pinned's to report."""
    problems = []
    for release in releases:
        try:
            pin = pinned_chart_of(str(release.inputs.get("chart", "")))
        except FileNotFoundError:
            continue
        schema = values_schema(pin.name)
        if schema is None:
            continue
        validator = jsonschema.validators.validator_for(schema)(schema)
        for error in sorted(validator.iter_errors(_revealed(release.inputs.get("values") or {})),
                            key=lambda e: [str(p) for p in e.absolute_path]):
            path = ".".join(str(p) for p in error.absolute_path) or "(values)"
            problems.append(f"Release {release.inputs.get('name', release.name)} ({pin.chart} {pin.version}): "
                            f"values.{path}: {error.message}")
    return problems
