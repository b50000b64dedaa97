"""`tenantry plan STACK --json` stays byte-identical for every shipped stack.

The golden copies in tests/golden/plan/ were written before the reshape that
moved the code into its rooms; a refactor that changes a figure, a key or its
order fails here. A deliberate change to the Plan regenerates them with
`tenantry plan STACK --json > tests/golden/plan/STACK.json` and says why in
its commit message.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tenantry.cli import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "plan"
STACKS = {path.stem: path for path in sorted((REPO / "stacks").glob("*.yaml")) if not path.name.startswith("Pulumi.")}
STACKS["tests-local"] = REPO / "tests" / "local" / "stack.yaml"


def test_every_stack_has_a_golden_copy():
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(STACKS)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_plan_json_is_byte_identical_to_the_golden_copy(name):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["plan", str(STACKS[name]), "--json"]) == 0
    assert printed.getvalue() == (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
