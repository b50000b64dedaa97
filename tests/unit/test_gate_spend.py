"""The gate's spend reconciliation (tenantry/gate/spend.py) on records and LiteLLM answers made
here; against the real stack, every gate scenario in tests/gate runs it."""

from __future__ import annotations

from tenantry.gate.records import Record
from tenantry.gate.spend import reconcile, served_by_tenant
from tenantry.showback import ShowbackError


def record(tenant: str, status: int = 200, cost: float | None = 0.001, error: str = "") -> Record:
    return Record(tenant=tenant, tier="guaranteed", profile="p", target="tiny", stage="s", sent=0.0, streamed=True,
                  status=status, e2e=0.1, cost_usd=cost, error=error)


RECORDS = [record("acme"), record("acme", cost=0.002), record("globex"), record("acme", status=429, cost=None),
           record("globex", error="stream cut")]


def never_sleep(_seconds: float) -> None:
    return None


def test_only_answered_requests_count_and_their_cost_is_summed():
    assert served_by_tenant(RECORDS) == {"acme": (2, 0.003, 0), "globex": (1, 0.001, 0)}


def test_spend_that_matches_what_was_served_passes():
    check = reconcile(RECORDS, lambda: {"acme": (2, 0.003 + 1e-12), "globex": (1, 0.001)}, sleep=never_sleep)
    assert check.passed and check.detail.startswith("every tenant charged what it was served: 2 tenants, 3 requests")


def test_records_still_being_written_are_waited_for():
    answers = iter([{"acme": (1, 0.001)}, {"acme": (2, 0.003), "globex": (1, 0.001)}])
    assert reconcile(RECORDS, lambda: next(answers), sleep=never_sleep).passed


def test_a_dropped_spend_write_fails_naming_the_tenant_and_both_sums():
    check = reconcile(RECORDS, lambda: {"acme": (1, 0.001), "globex": (1, 0.001)}, wait_seconds=0, sleep=never_sleep)
    assert not check.passed
    assert "acme: LiteLLM recorded 1 request(s), the gate was answered 2 times" in check.detail
    assert "acme: charged $0.00100000, served $0.00300000 at the Plan's prices" in check.detail


def test_a_tenant_charged_for_nothing_served_fails():
    check = reconcile(RECORDS, lambda: {"acme": (2, 0.003), "globex": (1, 0.001), "initech": (1, 0.5)},
                      wait_seconds=0, sleep=never_sleep)
    assert not check.passed and "initech: LiteLLM recorded 1 request(s), the gate was answered 0 times" in check.detail


def test_an_answer_without_usage_cannot_be_reconciled():
    check = reconcile([record("acme", cost=None)], lambda: {"acme": (1, 0.001)}, sleep=never_sleep)
    assert not check.passed and "acme: 1 answer(s) without usage, so unpriced" in check.detail


def test_an_unreadable_database_is_a_failed_check_that_says_so():
    def unreadable():
        raise ShowbackError("cannot read postgresql://litellm:***@db/litellm: connection refused")

    check = reconcile(RECORDS, unreadable, sleep=never_sleep)
    assert not check.passed and "could not be read: cannot read postgresql" in check.detail


def answered_on(replica: int, ended: float, cost: float = 0.001) -> Record:
    r = record("acme", cost=cost)
    r.gateway, r.sent, r.e2e = replica, ended - 0.5, 0.5
    return r


def test_only_the_killed_replicas_last_unwritten_answers_may_go_uncharged():
    from tenantry.gate.spend import at_risk

    records = [answered_on(0, 30.0), answered_on(1, 15.0), answered_on(1, 27.0), answered_on(1, 33.0)]
    risked = at_risk(records, (1, 28.0, 28.0), batch_seconds=5)  # replica 1 killed 28 s in: its last 10 s
    assert risked == [records[2]]
    check = reconcile(records, lambda: {"acme": (3, 0.003)}, sleep=never_sleep, lost_with_a_replica=risked)
    assert check.passed and "lost with it: acme 1 ($0.00100000)" in check.detail
    check = reconcile(records, lambda: {"acme": (2, 0.002)}, wait_seconds=0, sleep=never_sleep,
                      lost_with_a_replica=risked)
    assert not check.passed and "LiteLLM recorded 2 request(s), the gate was answered 4 times" in check.detail


def test_answers_until_the_kill_command_returned_are_at_risk_too():
    """CI: supervisorctl took about a second to signal the replica, which answered meanwhile; that
    answer's spend died with it (the window ended 1 s after the stage's start)."""
    from tenantry.gate.spend import at_risk, kill_window

    actions = [{"at": 0.0, "action": "stage before"}, {"at": 10.23, "action": "kill-gateway 1", "done": 10.9}]
    window = kill_window((1, 10.0), actions)
    assert window == (1, 10.23, 10.9)
    late = answered_on(1, 11.14)
    assert at_risk([late, answered_on(1, 12.5)], window, batch_seconds=2) == [late]
    assert at_risk([late], (1, 10.0, 10.0), batch_seconds=2) == []  # the stage's start alone missed it
    assert kill_window((1, 10.0), []) == (1, 10.0, 10.0)  # a run that did not record the command
    assert kill_window(None, actions) is None
