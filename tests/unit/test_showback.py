"""`tenantry showback`'s accounting on spend records written by hand (figures
worked out by hand below), its three formats, and its refusals of bad input.
tests/local/test_showback_live.py reads a real stack's records in PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from datetime import datetime

import pytest

from tenantry.cli import main
from tenantry.cli.showback import show
from tenantry.gate.records import Record
from tenantry.showback import NO_TEAM, Period, SpendGroup, SpendRecords, before, model_prices, showback
from tenantry.stacks import plan_stack

END = datetime(2026, 12, 1, 12, 0)
TWO_HOURS = Period(start=datetime(2026, 12, 1, 10, 0), end=END)


def round_priced_plan():
    """stacks/local.yaml with prices easy to work by hand: tiny 0.50 / 2.00 USD per 1k prompt / output
    tokens and 3 USD an hour, micro 0.10 / 0.40 and 1 USD an hour."""
    plan = plan_stack("local")
    prices = {"tiny": (0.5, 2.0, 3.0), "micro": (0.1, 0.4, 1.0)}
    engines = tuple(replace(e, tokens=replace(e.tokens, usd_per_1k_input_tokens=prices[e.name][0],
                                              usd_per_1k_output_tokens=prices[e.name][1],
                                              usd_per_hour=prices[e.name][2])) for e in plan.engines)
    return replace(plan, engines=engines)


def records(*period: SpendGroup, window: tuple[SpendGroup, ...] = ()) -> SpendRecords:
    return SpendRecords(period=period, budget_window=window)


def spent(tenant: str, model: str, usd: float) -> SpendGroup:
    return SpendGroup(tenant=tenant, model=model, requests=1, spend_usd=usd)


HAND_WRITTEN = records(
    # acme on tiny: 1,000 x 0.0005 + 500 x 0.002 = 1.50; on its adapter: 200 x 0.0005 + 100 x 0.002 = 0.30.
    SpendGroup(tenant="acme", model="tiny", requests=2, prompt_tokens=1000, completion_tokens=500, spend_usd=1.5),
    SpendGroup(tenant="acme", model="acme-support", requests=1, prompt_tokens=200, completion_tokens=100, spend_usd=0.3),
    # globex on tiny: 400 x 0.0005 + 100 x 0.002 = 0.40; on micro: 1,000 x 0.0001 + 1,000 x 0.0004 = 0.50,
    # but LiteLLM recorded 0.60.
    SpendGroup(tenant="globex", model="tiny", requests=1, prompt_tokens=400, completion_tokens=100, spend_usd=0.4),
    SpendGroup(tenant="globex", model="micro", requests=1, prompt_tokens=1000, completion_tokens=1000,
               spend_usd=0.6),
    window=(spent("acme", "tiny", 2.0), spent("acme", "acme-support", 1.0), spent("globex", "tiny", 0.4),
            spent("globex", "micro", 0.6)),
)


def test_since_counts_back_in_seconds_minutes_hours_days_weeks_and_calendar_months():
    assert before(END, "90s") == datetime(2026, 12, 1, 11, 58, 30)
    assert before(END, "90m") == datetime(2026, 12, 1, 10, 30)
    assert before(END, "12h") == datetime(2026, 12, 1, 0, 0)
    assert before(END, "2d") == datetime(2026, 11, 29, 12, 0)
    assert before(END, "1w") == datetime(2026, 11, 24, 12, 0)
    assert before(END, "1mo") == datetime(2026, 11, 1, 12, 0)
    assert before(datetime(2026, 3, 31), "1mo") == datetime(2026, 2, 28)  # the month's last day
    assert before(datetime(2026, 1, 15), "2mo") == datetime(2025, 11, 15)


@pytest.mark.parametrize("bad", ["3x", "0d", "1.5h", "h", "-1d", ""])
def test_a_duration_that_is_not_a_number_and_a_unit_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="write a number and s, m, h, d, w or mo"):
        before(END, bad)


def test_every_served_model_is_priced_as_litellm_charges_it():
    plan = plan_stack("local")
    prices = model_prices(plan)
    assert set(prices) == {"tiny", "acme-support", "globex-legal", "micro"}
    tiny = plan.engine("tiny").tokens
    assert prices["globex-legal"].engine == "tiny"
    assert prices["acme-support"].usd_per_input_token == tiny.usd_per_1k_input_tokens / 1000
    assert prices["acme-support"].cost(1000, 1000) == pytest.approx(
        tiny.usd_per_1k_input_tokens + tiny.usd_per_1k_output_tokens)


def test_the_gate_prices_each_answers_usage_at_the_plans_prices_of_the_model_that_served_it():
    plan = plan_stack("local")
    prices = model_prices(plan)
    answer = {"model": "acme-support", "usage": {"prompt_tokens": 120, "completion_tokens": 30,
                                                 "prompt_tokens_details": {"cached_tokens": 64}}}
    record = Record(tenant="acme", tier="guaranteed", profile="chat", target="acme-support", stage="steady", sent=0.0,
                    streamed=False, status=200, e2e=0.0)
    record.read_usage(answer, prices)
    tiny = plan.engine("tiny").tokens
    assert (record.served_by, record.prompt_tokens, record.output_tokens, record.cached_tokens) == (
        "acme-support", 120, 30, 64)
    assert record.cost_usd == pytest.approx((120 * tiny.usd_per_1k_input_tokens + 30 * tiny.usd_per_1k_output_tokens)
                                            / 1000)
    elsewhere = Record(tenant="acme", tier="guaranteed", profile="chat", target="tiny", stage="steady", sent=0.0,
                       streamed=False, status=200, e2e=0.0)
    elsewhere.read_usage({"model": "gpt-x", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}, prices)
    assert elsewhere.cost_usd is None  # a model the Plan does not price is not guessed


def test_an_adapters_records_count_on_its_engine_and_each_row_is_checked_against_the_plans_prices():
    report = showback(round_priced_plan(), TWO_HOURS, HAND_WRITTEN)
    rows = {(r.tenant, r.engine): r for r in report.rows}
    assert set(rows) == {("acme", "tiny"), ("globex", "tiny"), ("globex", "micro")}
    acme = rows["acme", "tiny"]
    assert (acme.requests, acme.prompt_tokens, acme.completion_tokens) == (3, 1200, 600)
    assert acme.spend_usd == pytest.approx(1.8) and acme.plan_usd == pytest.approx(1.8) and acme.price_agrees
    assert rows["globex", "tiny"].price_agrees
    micro = rows["globex", "micro"]
    assert micro.plan_usd == pytest.approx(0.5) and not micro.price_agrees
    assert not report.prices_agree
    assert report.warnings == ("globex on micro: LiteLLM recorded 0.6 USD for 1000 prompt and 1000 output tokens; "
                               "the Plan's prices make it 0.5 USD",)


def test_each_engines_gpu_bill_is_split_by_the_gpu_time_its_tenants_tokens_took():
    report = showback(round_priced_plan(), TWO_HOURS, HAND_WRITTEN)
    rows = {(r.tenant, r.engine): r for r in report.rows}
    # tiny: 3 USD/h x 2 h = 6 USD; its tokens at the Plan's prices: acme 1.80 + globex 0.40 = 2.20.
    assert rows["acme", "tiny"].gpu_bill_share == pytest.approx(1.8 / 2.2)
    assert rows["acme", "tiny"].gpu_bill_usd == pytest.approx(6 * 1.8 / 2.2)  # 4.91
    assert rows["globex", "tiny"].gpu_bill_usd == pytest.approx(6 * 0.4 / 2.2)  # 1.09
    # micro: 1 USD/h x 2 h = 2 USD, all globex's.
    assert rows["globex", "micro"].gpu_bill_usd == pytest.approx(2.0)
    engines = {e.engine: e for e in report.engines}
    assert engines["tiny"].bill_usd == pytest.approx(6.0) and engines["tiny"].utilisation == pytest.approx(2.2 / 6)
    assert engines["micro"].utilisation == pytest.approx(0.5 / 2)
    tenants = {t.tenant: t for t in report.tenants}
    assert tenants["globex"].gpu_bill_usd == pytest.approx(6 * 0.4 / 2.2 + 2.0)
    assert sum(t.gpu_bill_usd for t in report.tenants) == pytest.approx(6.0 + 2.0)  # every engine used: all of it


def test_budget_used_is_the_spend_in_the_current_window_over_the_budget():
    report = showback(round_priced_plan(), TWO_HOURS, HAND_WRITTEN)
    rows = {(r.tenant, r.engine): r for r in report.rows}
    tenants = {t.tenant: t for t in report.tenants}
    # acme: 2.00 + 1.00 within its window of a 5 USD budget; globex: 0.40 + 0.60 of 2 USD.
    assert rows["acme", "tiny"].budget_used == pytest.approx(0.6)
    assert rows["globex", "tiny"].budget_used == pytest.approx(0.2)
    assert rows["globex", "micro"].budget_used == pytest.approx(0.3)
    assert tenants["acme"].budget_used == pytest.approx(0.6) and tenants["globex"].budget_used == pytest.approx(0.5)
    assert (tenants["acme"].budget_usd, tenants["acme"].budget_window) == (5.0, "1d")


def test_a_tenant_with_spend_in_its_window_only_still_shows_its_budget_used():
    report = showback(round_priced_plan(), TWO_HOURS, records(window=(spent("initech", "tiny", 0.25),)))
    (row,) = report.rows
    assert (row.tenant, row.requests, row.spend_usd, row.budget_used) == ("initech", 0, 0.0, 0.25)
    assert report.prices_agree  # nothing in the period to disagree


def test_rounding_is_not_a_disagreement():
    tiny = SpendGroup(tenant="acme", model="tiny", requests=3, prompt_tokens=7, completion_tokens=3,
                      spend_usd=7 * 0.0005 + 3 * 0.002 + 1e-12)
    assert showback(round_priced_plan(), TWO_HOURS, records(tiny)).prices_agree


def test_teams_and_models_outside_the_plan_are_shown_and_named():
    report = showback(round_priced_plan(), TWO_HOURS, records(
        SpendGroup(tenant="ghost", model="tiny", requests=1, prompt_tokens=2, completion_tokens=0, spend_usd=0.001),
        SpendGroup(tenant=NO_TEAM, model="gpt-x", requests=1, prompt_tokens=2, spend_usd=0.5)))
    rows = {(r.tenant, r.engine): r for r in report.rows}
    assert rows["ghost", "tiny"].price_agrees and rows["ghost", "tiny"].budget_used is None
    assert rows[NO_TEAM, "gpt-x"].plan_usd is None and rows[NO_TEAM, "gpt-x"].gpu_bill_usd == 0
    assert not report.prices_agree  # a model the Plan does not price cannot be checked
    assert report.warnings == ("team ghost: not a tenant of stack local (no tier, no budget)",
                               "model gpt-x: not served by stack local, so not priced and not in any GPU bill")


def priced(plan, tenant: str, model: str, prompt: int, output: int, extra_usd: float = 0.0) -> SpendGroup:
    cost = model_prices(plan)[model].cost(prompt, output)
    return SpendGroup(tenant=tenant, model=model, requests=1, prompt_tokens=prompt, completion_tokens=output,
                      spend_usd=cost + extra_usd)


def printed(capsys, output_format: str, *groups: SpendGroup,
            window: tuple[SpendGroup, ...] = ()) -> tuple[int, str, str]:
    """What `tenantry showback local --format FORMAT` prints for these records, and its exit code."""
    code = show(showback(plan_stack("local"), TWO_HOURS, records(*groups, window=window)), output_format)
    out, err = capsys.readouterr()
    return code, out, err


def agreeing():
    plan = plan_stack("local")
    return (priced(plan, "acme", "tiny", 100, 20), priced(plan, "globex", "globex-legal", 300, 40))


def test_the_table_shows_every_tenant_and_engine_checked(capsys):
    code, out, err = printed(capsys, "table", *agreeing())
    assert code == 0 and err == ""
    for heading in ("Per tenant and engine", "Per tenant", "Per engine", "GPU share", "budget used"):
        assert heading in out
    assert "acme" in out and "globex" in out and "micro" in out and "✓" in out and "✗" not in out


def test_csv_has_a_row_per_tenant_and_engine(capsys):
    window = (priced(plan_stack("local"), "acme", "tiny", 100, 20),)
    code, out, _ = printed(capsys, "csv", *agreeing(), window=window)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    assert [(r["tenant"], r["engine"], r["requests"], r["price_agrees"]) for r in rows] == [
        ("acme", "tiny", "1", "True"), ("globex", "tiny", "1", "True")]
    assert float(rows[0]["budget_used"]) == pytest.approx(window[0].spend_usd / 5)


def test_json_carries_rows_tenants_engines_and_the_period(capsys):
    code, out, _ = printed(capsys, "json", *agreeing())
    data = json.loads(out)
    assert code == 0 and data["stack"] == "local" and data["prices_agree"] is True
    assert data["hours"] == pytest.approx(2) and data["since"] == "2026-12-01T10:00:00Z"
    assert [r["engine"] for r in data["rows"]] == ["tiny", "tiny"]
    assert {t["tenant"] for t in data["tenants"]} == {"acme", "globex"}
    assert {e["engine"] for e in data["engines"]} == {"tiny", "micro"} and data["warnings"] == []


def test_a_disagreeing_row_exits_1_and_is_named_in_every_format(capsys):
    overcharged = priced(plan_stack("local"), "acme", "acme-support", 100, 20, extra_usd=0.01)
    code, out, _ = printed(capsys, "table", overcharged)
    assert code == 1 and "✗" in out and "acme on tiny: LiteLLM recorded" in out
    code, out, err = printed(capsys, "csv", overcharged)
    assert code == 1 and "acme on tiny: LiteLLM recorded" in err and ",False," in out
    code, out, _ = printed(capsys, "json", overcharged)
    assert code == 1 and json.loads(out)["rows"][0]["price_agrees"] is False


def one_error_line(capsys, *args: str) -> str:
    assert main(["showback", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def test_a_bad_since_is_refused_in_one_line(capsys):
    assert one_error_line(capsys, "local", "--since", "3x", "--database-url", "postgresql://x@127.0.0.1:1/x") == (
        "--since 3x: write a number and s, m, h, d, w or mo (90m, 12h, 7d, 1mo)")


def test_an_unknown_stack_is_refused(capsys):
    assert main(["showback", "no-such-stack", "--database-url", "postgresql://x@127.0.0.1:1/x"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_an_unreachable_database_is_refused_in_one_line_without_its_password(capsys):
    line = one_error_line(capsys, "local", "--database-url", "postgresql://litellm:hunter2@127.0.0.1:1/litellm")
    assert line.startswith("the spend records could not be read from postgresql://litellm:***@127.0.0.1:1/litellm")
    assert "hunter2" not in line


def test_without_a_local_stack_it_says_how_to_start_one(capsys, tmp_path):
    line = one_error_line(capsys, "local", "--dir", str(tmp_path))
    assert f"no local stack was started from {tmp_path}" in line and "--database-url" in line


def test_a_local_stack_of_another_spec_is_not_priced_with_this_one(capsys, tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"stack": "tests-local", "spec": "tests/local/stack.yaml",
                                                     "port_base": 19100, "ports": {"postgres": 19101}}))
    line = one_error_line(capsys, "local", "--dir", str(tmp_path))
    assert "runs tests/local/stack.yaml, not" in line
