"""Every scenario's short version against the real local stack, with the
verdict it must reach there. Latency is reported, not judged (tests/gate/conftest.py): a tenant passes on its errors
and refusals, and noisy-neighbour judges its victim's latency as a ratio within the run."""

from __future__ import annotations

import re

import pytest

from tests.gate.test_report import assert_renders

pytestmark = pytest.mark.slow


def test_steady_mix_passes_every_tenant(gate):
    run = gate("steady")
    assert run.exit_code == 0, run.output
    for name in ("acme", "globex"):
        tenant = run.tenant(name)
        assert tenant["passed"] is True and tenant["succeeded"] > 0, tenant
        assert tenant["ttft_p95"] is not None  # reported
    # Spot runs on idle capacity only, and stacks/local.yaml pauses it while the others
    # are active: it either passed on what it got, or was refused by admission throughout.
    spot = run.tenant("initech")
    assert spot["passed"] is True or (spot["passed"] is None and spot["shed_429"] == spot["requests"] > 0), spot
    assert run.tenant("acme")["quota_429"] == 0
    assert re.search(r"acme\s+.*guaranteed.*PASS", run.output)  # the per-tenant table


def test_noisy_neighbour_passes_with_the_policy_and_reports_both_side_by_side(gate, tmp_path):
    run = gate("noisy-neighbour", "--side-by-side")
    assert run.exit_code == 0, run.output  # the policy-on verdict
    on, off = run.verdict("policy-on"), run.verdict("policy-off")
    assert on["passed"] is True
    assert on["tenants"]["acme"]["passed"] is True and on["tenants"]["initech"]["passed"] is None  # not judged
    assert next(c for c in on["checks"] if c["name"] == "flood-latency")["passed"]  # acme's TTFT, flood to alone
    flood = on["stages"]["flood"]
    assert flood["initech"]["requests"] > flood["acme"]["requests"]  # the flood really ran
    assert flood["initech"]["shed_429"] > 0  # and was pushed back by admission
    assert off["stages"]["flood"]["initech"]["requests"] > 0
    assert "with the policy" in run.output and "without" in run.output  # the comparison printed
    report = (run.directory / "report.html").read_text()
    assert "What tenantry&#x27;s policy changes" in report or "What tenantry's policy changes" in report
    assert "plain LiteLLM (no policy, FCFS)" in report
    assert_renders(run.directory / "report.html", tmp_path, figures=6)


def test_over_quota_tenant_gets_429s_and_nobody_else(gate):
    run = gate("over-quota")
    assert run.exit_code == 0, run.output
    check = run.check("over-quota")
    assert check["passed"], check
    assert run.tenant("globex")["quota_429"] > 0
    assert run.tenant("acme")["quota_429"] == run.tenant("acme")["shed_429"] == 0
    assert run.tenant("initech")["quota_429"] == 0


def test_priority_ordering_under_a_saturating_spot_tenant(gate):
    run = gate("priority-ordering")
    assert run.exit_code == 0, run.output
    check = run.check("priority-ordering")
    assert check["passed"], check
    assert run.tenant("acme")["passed"] is True
    assert run.tenant("initech")["shed_429"] > 0  # admission held spot back while acme ran


def test_engine_failure_mid_run_is_served_by_the_fallback(gate):
    run = gate("engine-failure")
    assert run.exit_code == 0, run.output
    check = run.check("fallback-served")
    assert check["passed"], check
    assert run.tenant("acme")["passed"] is True  # within its error SLO
    assert "engine tiny started again and healthy" in run.output
    actions = [a["action"] for a in run.verdict()["actions"]]
    assert "stop-engine tiny" in actions


def test_an_engine_killed_mid_stream_ends_its_streams_with_an_error_event_and_the_fallback_serves(gate):
    run = gate("engine-killed")
    assert run.exit_code == 0, run.output
    check = run.check("fallback-served")
    assert check["passed"], check
    assert re.search(r"[1-9]\d* in flight as it was killed failed", check["detail"]), check  # streams were cut
    actions = [a["action"] for a in run.verdict()["actions"]]
    assert "kill-engine tiny" in actions, actions


def test_cache_isolation_hits_only_where_salts_match(gate):
    run = gate("cache-isolation")
    assert run.exit_code == 0, run.output
    check = run.check("cache-isolation")
    assert check["passed"], check
    assert re.search(r"\d+ probe pairs: [1-9]\d* hits where the salts match, [1-9]\d* misses", check["detail"])


def test_ramp_raises_the_load_step_by_step_and_serves_the_guaranteed_tenant_up_to_its_contract(gate):
    """What the short ramp can show on two shared cores: the load really rose step by step, and up to the
    contract (x1) the guaranteed tenant was neither refused for capacity nor failed. Where its latency broke is
    reported (each 20 s step holds about 15 of acme's requests, so a step's p95 is nearly its slowest request):
    the real run judges it."""
    run = gate("ramp")
    check, stages = run.check("ramp"), run.verdict()["stages"]
    assert list(stages) == ["x0.25", "x0.5", "x1", "x1.5", "x2"]
    sent = {name: sum(t["requests"] for t in tenants.values()) for name, tenants in stages.items()}
    assert sent["x2"] > 2 * sent["x0.25"], sent  # eight times the offered load
    for name in ("x0.25", "x0.5", "x1"):
        acme = stages[name]["acme"]
        assert acme["shed_429"] == 0 and acme["errors"] == 0, (name, acme)
    assert sum(stages[name]["acme"]["succeeded"] for name in ("x0.25", "x0.5", "x1")) > 0
    assert check["passed"] and "requests sent per step" in check["detail"], check
    assert "latency reported, not judged: acme TTFT p50 x" in check["detail"], check
    assert run.exit_code == 0, run.output


def test_a_bad_invocation_is_a_clear_error_not_a_traceback(gate):
    run = gate("noisy")
    assert run.exit_code == 2 and "invalid choice: 'noisy' (choose from 'steady'" in run.output
    assert "Traceback" not in run.output
    run = gate("steady", "--gateway", "http://127.0.0.1:1")
    assert run.exit_code == 2 and "--gateway and --keys go together" in run.output
