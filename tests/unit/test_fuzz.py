"""Random mutations of valid specs end in a Plan or a SpecError, never in any
other exception: bad input never shows a user a traceback."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from tenantry.cli.plan_report import print_plan
from tenantry.findings import SpecError
from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tests.unit.specs import base_spec, to_yaml

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [base_spec()] + [
    yaml.safe_load(p.read_text()) for p in sorted((ROOT / "stacks").glob("*.yaml"))
    if not p.name.startswith("Pulumi.") and p.stem != "h200-many-adapters"
]

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2, 3, 7, 8, 16, 128, 256, 257, 4096, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 0.9, 1.0, 1.0001, -0.1, 1e-9]),
    st.text(max_size=20),
    st.sampled_from(["big", "small", "alpha", "beta", "whole", "sliced", "3g.40gb", "1g.10gb", "H100-80GB-SXM",
                     "L40S-48GB", "llama-3.1-8b", "guaranteed", "spot", "fp8", "1.31", "30d", "tenant-x", "a@b"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, prefix + (index,))
    return found


def _mutate(spec: Any, data: st.DataObject) -> Any:
    paths = _paths(spec)
    path = data.draw(st.sampled_from(paths[1:]))
    parent = spec
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    action = data.draw(st.sampled_from(["replace", "delete", "add-key", "duplicate", "empty"]))
    if action == "replace":
        parent[key] = data.draw(VALUES)
    elif action == "delete":
        del parent[key]
    elif action == "add-key" and isinstance(parent, dict):
        parent[data.draw(st.text(min_size=1, max_size=8))] = data.draw(VALUES)
    elif action == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))
    elif action == "empty":
        parent[key] = type(parent[key])() if isinstance(parent[key], (list, dict, str)) else None
    return spec


def _plan_or_spec_error(text: str) -> None:
    try:
        spec = load_spec_text(text)
    except SpecError as error:
        assert error.findings and all(f.message for f in error.findings)
        return
    result = plan(spec, "fuzz")
    result.to_dict()
    print_plan(result, Console(file=io.StringIO(), width=140))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_structural_mutations_end_in_a_plan_or_a_spec_error(data):
    spec = copy.deepcopy(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        spec = _mutate(spec, data)
    _plan_or_spec_error(to_yaml(spec))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_text_mutations_end_in_a_plan_or_a_spec_error(data):
    text = to_yaml(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(min_value=0, max_value=len(text)))
        cut = data.draw(st.integers(min_value=0, max_value=8))
        insert = data.draw(st.text(alphabet=st.sampled_from(list(":-[]{}&*!|>'\"#% \n\t,?0123456789abc.\\\x00")), max_size=6))
        text = text[:at] + insert + text[at + cut:]
    _plan_or_spec_error(text)
