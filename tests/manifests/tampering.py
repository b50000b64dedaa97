"""Renderings with one object changed: how the manifest tests show a policy catches what it should."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tenantry.manifests.resources import Resource


def changed(resources: list[Resource], kind: str, name: str, change: Callable[[dict[str, Any]], Any]) -> list[Resource]:
    """A copy of the rendering with one object changed by `change(props)`."""
    out = []
    for r in resources:
        if r.kind == kind and r.metadata.get("name") == name:
            props = copy.deepcopy(r.props)
            change(props)
            r = replace(r, props=props)
        out.append(r)
    return out
