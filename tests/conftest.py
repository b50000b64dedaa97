"""Session-wide: the live stacks start in the background once the session knows it needs them
(tests/live_stacks.py), and any left at its end are stopped. Every run ends with its time per test directory
(issue 33: the cost of each part of `make test` stays visible)."""

from __future__ import annotations

from collections import defaultdict

from tests import live_stacks

SECONDS_PER_DIRECTORY: dict[str, float] = defaultdict(float)


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    for stack in live_stacks.STACKS:
        if live_stacks.needed(session.items, stack):
            live_stacks.start(stack)


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
