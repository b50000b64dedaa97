"""The tests' own rules (issue 33): no test waits a guessed time for something it could watch happen. A
sleep inside a loop paces a poll that watches for the effect, bounded by its deadline; a sleep outside any
loop bets that something has happened by then, which a loaded machine loses. The few waits whose length is
the effect under test are named here, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

WAITS_THAT_ARE_THE_EFFECT = {
    ("local/conftest.py", "answers_again_after_idle"):
        "the idle time is what the keep-alive test measures the server against",
    ("local/test_tenant_policy_live.py", "test_unknown_engine_load_pauses_spot_but_never_guaranteed"):
        "the Plan's metrics_max_age_seconds must pass for the stopped engine's last sample to be stale",
    ("local/test_tenant_policy_live.py", "_past_the_metrics_cache"):
        "the plugin's metrics cache lifetime, a setting: past it, no load fetched before the engine filled is used",
    ("local/test_showback_live.py", "test_showback_spend_per_tenant_is_the_sum_of_the_answers_priced_at_the_plans_prices"):
        "`--since` counts whole seconds: the first request must fall a second after the period's start",
    ("local/test_alerts_live.py", "budget_warning"):
        "paces the requests of wait_for's poll, so the spend gauges are scraped between them",
    ("local/held_streams.py", "_burst"):
        "the engine's run between two looks at its gauge, each a step of _wait's poll: a pace, not a guess",
    ("unit/test_policy_front_door.py", "receive"):
        "a client that never sends its body; the front door's read time ends it",
}


def bare_sleeps(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every time.sleep/asyncio.sleep outside a loop; sleep(0), a yield to
    the event loop, is not a wait."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("time", "asyncio")):
            continue
        if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0:
            continue
        in_loop, function, at = False, "", node
        while at in parents:
            at = parents[at]
            in_loop = in_loop or isinstance(at, (ast.While, ast.For, ast.AsyncFor))
            if isinstance(at, (ast.FunctionDef, ast.AsyncFunctionDef)) and not function:
                function = at.name
        if not in_loop:
            found.append((node.lineno, function))
    return found


def test_the_check_finds_a_sleep_outside_a_loop_and_passes_a_poll():
    source = ("import time\ndef guess():\n    time.sleep(2)\n"
              "def poll():\n    while not done():\n        time.sleep(0.5)\n")
    assert bare_sleeps(source) == [(3, "guess")]


def test_no_test_sleeps_a_guessed_time():
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS).as_posix()
        for line, function in bare_sleeps(path.read_text()):
            if (relative, function) not in WAITS_THAT_ARE_THE_EFFECT:
                found[f"{relative}:{line}"] = function
    assert not found, f"sleeps outside a poll (watch for the effect instead, or name the wait here): {found}"


def test_every_named_wait_is_still_there():
    present = {(path.relative_to(TESTS).as_posix(), function)
               for path in TESTS.rglob("*.py") for _, function in bare_sleeps(path.read_text())}
    assert set(WAITS_THAT_ARE_THE_EFFECT) <= present, set(WAITS_THAT_ARE_THE_EFFECT) - present


def test_the_skips_table_in_the_decisions_lists_every_skip_of_the_run():
    """docs/decisions.md's table of skips is the run's: each waived (node, control, fact) of tests/ansible."""
    from tests.ansible import node
    from tests.ansible.controls import FACTS

    skipped = {(key, fact.control, fact.name) for key, kind in node.NODES.items() for fact in FACTS
               if (fact.live or kind.target != "container") and fact.control in node.controls_of(key)
               and node.waiver(kind.target, fact.control, fact.name)}
    decisions = (TESTS.parent / "docs" / "decisions.md").read_text()
    table = decisions.split("## What `make test` skips, and what would run it")[1].split("\n## ")[0]
    listed = set()
    for row in table.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if row.startswith("| ") and len(cells) == 4 and cells[1] not in ("control", "---"):
            listed |= {(key.strip(), cells[1], cells[2]) for key in cells[0].split(",")}
    assert listed == skipped, {"not listed": skipped - listed, "not skipped": listed - skipped}
    assert f"the {len(skipped)} Ansible facts" in table
