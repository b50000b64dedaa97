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


def planned_rendering(stack: str):
    """A shipped stack's Plan, its rendering through the mock runtime and the rendering's resources for the policies."""
    from tenantry.manifests.checks import policy_resources
    from tenantry.manifests.offline import render
    from tenantry.stacks import plan_stack, stack_path

    rendering = render(stack_path(stack), stack)
    return plan_stack(stack), rendering, policy_resources(rendering)


def manifest(rendering, kind: str, name: str) -> dict:
    """The rendered object of this kind and name."""
    return next(m for m in rendering.manifests() if m["kind"] == kind and m["metadata"]["name"] == name)
