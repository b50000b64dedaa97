"""Renderings shared between the manifest tests, and with one object changed: how the manifest tests show a policy
catches what it should."""

from __future__ import annotations

import copy
import functools
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


@functools.cache
def _rendered_once(stack: str):
    from tenantry.manifests.offline import render
    from tenantry.stacks import stack_path

    return render(stack_path(stack), stack)


def shared_render(stack: str):
    """A shipped stack rendered through the mock runtime, once per session (a render takes seconds and some twenty
    modules read the same six stacks), handed out as a copy of its own: a test may change what it is given."""
    return copy.deepcopy(_rendered_once(stack))


def planned_rendering(stack: str):
    """A shipped stack's Plan, its rendering through the mock runtime and the rendering's resources for the policies."""
    from tenantry.manifests.checks import policy_resources
    from tenantry.stacks import plan_stack

    rendering = shared_render(stack)
    return plan_stack(stack), rendering, policy_resources(rendering)


def manifest(rendering, kind: str, name: str) -> dict:
    """The rendered object of this kind and name."""
    return next(m for m in rendering.manifests() if m["kind"] == kind and m["metadata"]["name"] == name)
