"""Session-wide: the live stacks start in the background once the session knows it needs them
(tests/live_stacks.py), then Ansible's throwaway nodes (tests/ansible/builds.py), and any left at the end are stopped.
The directories run in ORDER: the quick ones while the stacks start, the live ones while the nodes build, Ansible's
last, on nodes built by then. `make test` runs tests/local as a session of its own beside the others
(tests/lanes.py); the ORDER holds within each. Every run ends with its time per test directory (issue 33: the cost of each part of
`make test` stays visible)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests import live_stacks
from tests.ansible import builds

ORDER = ("unit", "manifests", "gate", "local", "ansible")
"""The test directories, in the order they run (others after them, in pytest's order)."""
FIRST_IN_LOCAL = ("test_faults_live.py", "test_alerts_live.py")
"""tests/local's modules that run first, in this order (the others after them, in pytest's order): the faults'
scenarios leave the tenants' rate-limit windows spent, and the alert drills, which need none of them, wait
minutes on Prometheus meanwhile, so no module after them waits for those windows to end
(tests/local/conftest.py: whole_rate_limits)."""
TESTS = Path(__file__).resolve().parent

SECONDS_PER_DIRECTORY: dict[str, float] = defaultdict(float)


def _rank(item) -> tuple[int, int]:
    parts = Path(item.path).relative_to(TESTS).parts
    directory = ORDER.index(parts[0]) if parts[0] in ORDER else len(ORDER)
    first = FIRST_IN_LOCAL.index(parts[1]) if parts[0] == "local" and parts[1] in FIRST_IN_LOCAL \
        else len(FIRST_IN_LOCAL)
    return directory, first


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=_rank)  # stable: each directory keeps pytest's own order


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    for stack in live_stacks.STACKS:
        if live_stacks.needed(session.items, stack):
            live_stacks.start(stack)
    if builds.needed(session.items):
        builds.start(after=live_stacks.started)


def pytest_runtest_logreport(report):
    """Setup, call and teardown of each test, summed by its directory (tests/local, tests/gate, ...)."""
    SECONDS_PER_DIRECTORY["/".join(report.nodeid.split("::")[0].split("/")[:2])] += report.duration


def pytest_terminal_summary(terminalreporter):
    if SECONDS_PER_DIRECTORY:
        terminalreporter.write_sep("=", "time per test directory")
        for directory, seconds in sorted(SECONDS_PER_DIRECTORY.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{directory:<24} {seconds:7.0f} s  {seconds / 60:5.1f} min")


def pytest_sessionfinish(session, exitstatus):
    live_stacks.down_any_left()
    builds.remove_all()  # nodes of an interrupted or deselected tests/ansible/
