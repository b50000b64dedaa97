"""The suite against the roles, without a node: every control has a test and every control test names a control;
every waiver names a real target, control and fact, and says why; ansible-lint passes at its production profile."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from tests.ansible import (node, test_controls, test_firewall_live, test_kernel_live, test_lockout_live, test_overrides,
                           test_refusals)
from tests.ansible.controls import FACTS, KERNEL_FACTS

CONTROL_MODULES = (test_controls, test_refusals, test_overrides, test_firewall_live, test_kernel_live, test_lockout_live)


@pytest.fixture(scope="module")
def control_tests() -> dict[str, set[str]]:
    """Each control test of the control modules and the controls it names: the fact's of every case of
    test_controls, the `control` marks of every other test."""
    tests: dict[str, set[str]] = {}
    for module in CONTROL_MODULES:
        for name, function in vars(module).items():
            if not name.startswith("test_"):
                continue
            marks = getattr(function, "pytestmark", [])
            cases = [m for m in marks if m.name == "parametrize" and "fact" in m.args[0]]
            for case in cases[0].args[1] if cases else []:
                tests[f"{name}[{case.id}]"] = {case.values[1].control}
            if not cases:
                tests[name] = {m.args[0] for m in marks if m.name == "control"}
    return tests


def test_every_control_has_a_test(control_tests):
    tested = set().union(*control_tests.values())
    assert set(node.control_tasks()) - tested == set()


def test_every_control_test_names_a_control_of_the_roles(control_tests):
    known = set(node.control_tasks())
    assert {test: names for test, names in control_tests.items() if not names or names - known} == {}
    assert {test for test, names in control_tests.items() if not all(
        n in test.replace("_", "-") for n in names)} == set(), "a control's ID missing from its test's name"


def test_facts_are_unique():
    assert [fid for fid, count in Counter(f.id for f in (*FACTS, *KERNEL_FACTS)).items() if count > 1] == []


def test_every_waiver_names_a_target_a_control_and_its_facts_and_says_why():
    facts = {(f.control, f.name) for f in FACTS}
    problems = []
    for target, controls in node.waivers().items():
        if target == "unproven":
            continue
        if target not in node.TARGETS:
            problems.append(f"{target}: not a target kind {node.TARGETS}")
        for control, entry in controls.items():
            if control not in node.control_tasks():
                problems.append(f"{target}/{control}: no such control")
            if len(str(entry.get("why", "")).split()) < 8:
                problems.append(f"{target}/{control}: no justification")
            problems += [f"{target}/{control}: no fact {name}" for name in entry.get("facts", [])
                         if (control, name) not in facts]
    assert problems == []


def test_a_fact_no_kind_shows_is_marked_unproven_by_name():
    """A fact waived on every kind whose roles have its control, and read in no VM, is proven nowhere: it is listed
    under `unproven` in waivers.yml with what would prove it, and nothing listed there is shown somewhere."""
    in_the_vm = {case.values[1].id for case in test_kernel_live.CASES}
    nowhere = set()
    for fact in FACTS:
        kinds = [key for key, kind in node.NODES.items()
                 if fact.control in node.controls_of(key) and (fact.live or kind.target != "container")]
        if kinds and fact.id not in in_the_vm and all(
                node.waiver(node.NODES[key].target, fact.control, fact.name) for key in kinds):
            nowhere.add((fact.control, fact.name))
    marked = {(control, name) for control, entry in node.unproven().items() for name in entry["facts"]}
    assert nowhere == marked, {"proven nowhere, not marked": nowhere - marked, "marked, shown somewhere": marked - nowhere}
    assert all(len(entry["why"].split()) >= 8 for entry in node.unproven().values())


def test_ansible_lint_passes_at_the_production_profile():
    done = subprocess.run([str(node.ANSIBLE_BIN / "ansible-lint"), "--offline", "--profile", "production",
                           "--nocolor"], cwd=node.ANSIBLE_DIR, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_readme_lists_every_control_as_its_task_names_it():
    readme = (node.ANSIBLE_DIR / "README.md").read_text()
    rows = {f"| {control} | {name.rsplit(' [', 1)[0]} |" for control, name in node.control_tasks().items()}
    assert {row for row in rows if row not in readme} == set()
