"""Session-wide: the live stacks start in the background once the session knows it needs them
(tests/live_stacks.py), and any left at its end are stopped."""

from __future__ import annotations

from tests import live_stacks


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    for stack in live_stacks.STACKS:
        if live_stacks.needed(session.items, stack):
            live_stacks.start(stack)


def pytest_sessionfinish(session, exitstatus):
    live_stacks.down_any_left()
