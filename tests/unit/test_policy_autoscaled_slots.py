"""Admission on an autoscaled engine (issue 34, item 13): the Plan reserves slots on the engine's floor of
replicas; each replica the autoscaler adds brings its max_num_seqs to the unreserved slots once the engine's
fresh load reports it, and only then. Through the plugin's hook against a real Redis (tests/unit/conftest.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from litellm.proxy._types import ProxyException

from tests.unit.policy_plugin import key, run, seen


def _autoscaled(policy, engine: str, most: int) -> None:
    """The engine under an autoscaler with this ceiling, and globex allowed more in flight than any count
    below, so that only the engine's unreserved slots refuse it."""
    engines = {**policy.settings.engines,
               engine: dataclasses.replace(policy.settings.engines[engine], max_replicas=most)}
    globex = dataclasses.replace(policy.settings.tenants["globex"], max_concurrency=100)
    policy.settings = dataclasses.replace(policy.settings, engines=engines,
                                          tenants={**policy.settings.tenants, "globex": globex})


def _admitted_until_refused(policy, engine: str) -> tuple[int, ProxyException]:
    admitted = 0
    while True:
        try:
            run(policy.async_pre_call_hook(key("globex"), None, {"model": engine, "prompt": "x"}, "atext_completion"))
        except ProxyException as refused:
            return admitted, refused
        admitted += 1
        assert admitted < 100, "never refused"


@pytest.mark.parametrize("reported, counted", [(1, 1), (2, 2), (3, 3), (5, 3)])
def test_the_replicas_the_engine_reports_bring_their_slots_up_to_the_ceiling(policy, reported, counted):
    tiny = policy.settings.engines["tiny"]
    assert (tiny.replicas, tiny.max_num_seqs, tiny.shared_slots) == (1, 8, 4)  # tests below count from these
    _autoscaled(policy, "tiny", most=3)
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time(), replicas=reported)
    admitted, refused = _admitted_until_refused(policy, "tiny")
    expected = 4 + (counted - 1) * 8
    assert admitted == expected
    assert refused.code == "429" and f"all {expected} unreserved slots are busy" in refused.message


def test_an_engine_whose_load_is_stale_is_counted_on_its_floor(policy):
    """A stale state may show replicas the autoscaler has since removed: only the floor is sure to exist."""
    _autoscaled(policy, "tiny", most=3)
    max_age = policy.settings.admission.metrics_max_age_seconds
    policy.metrics._states["tiny"] = seen(0, 0, 0.0, at=time.time() - max_age - 5, replicas=3)
    admitted, refused = _admitted_until_refused(policy, "tiny")
    assert admitted == 4 and "all 4 unreserved slots are busy" in refused.message
