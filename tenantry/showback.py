"""Showback: what each tenant used of each engine over a period and what it
cost, from LiteLLM's spend records, checked against the Plan's prices.

`read_spend` reads LiteLLM's spend records (PostgreSQL, table
"LiteLLM_SpendLogs" joined to "LiteLLM_TeamTable" for the tenant, whose name
is the team alias); `showback` is the pure accounting over them: spend per
tenant and engine, the same tokens at the Plan's prices, each tenant's share
of each engine's GPU bill (split by the GPU time their tokens took: docs/showback.md)
and of its budget.
"""

from __future__ import annotations

import calendar
import re
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from tenantry.plan.model import EnginePlan, Plan
from tenantry.spec.fields import WINDOW_PATTERN

NO_TEAM = "(no team)"
"""Spend recorded without a team: calls with the master key or a key outside tenantry's teams."""
ROUNDING_USD = 1e-9
"""Recorded spend within this of the Plan's price (or a millionth of it, whichever is larger) agrees:
both are sums of floating-point products, never equal to the last bit."""
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class ShowbackError(Exception):
    """Showback cannot run as asked; the message names the argument or the database."""


def before(moment: datetime, duration: str) -> datetime:
    """`moment` less a duration written as budget windows are (90m, 12h, 7d, 2w, 1mo); a month is a
    calendar month, clamped to the month's last day, as LiteLLM counts a monthly budget window."""
    match = re.match(WINDOW_PATTERN, duration)
    if match is None:
        raise ValueError(f"{duration}: write a number and s, m, h, d, w or mo (90m, 12h, 7d, 1mo)")
    unit = match.group(1)
    number = int(duration[: -len(unit)])
    if unit != "mo":
        return moment - timedelta(seconds=number * _SECONDS[unit])
    year, month = divmod(moment.year * 12 + moment.month - 1 - number, 12)
    return moment.replace(year=year, month=month + 1, day=min(moment.day, calendar.monthrange(year, month + 1)[1]))


@dataclass(frozen=True, kw_only=True)
class ModelPrice:
    engine: str
    usd_per_input_token: float
    usd_per_output_token: float

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return prompt_tokens * self.usd_per_input_token + output_tokens * self.usd_per_output_token


def model_prices(plan: Plan) -> dict[str, ModelPrice]:
    """Every model the gateway serves (each engine and its adapters) and its per-token prices: what
    tenantry/configs/litellm.py gives LiteLLM to charge."""
    return {
        served: ModelPrice(engine=engine.name, usd_per_input_token=engine.tokens.usd_per_1k_input_tokens / 1000,
                           usd_per_output_token=engine.tokens.usd_per_1k_output_tokens / 1000)
        for engine in plan.engines
        for served in (engine.name, *(a.name for a in engine.lora.adapters))
    }


@dataclass(frozen=True, kw_only=True)
class SpendGroup:
    """LiteLLM's spend records of one team and one model, summed."""

    tenant: str
    """The team's alias (the tenant's name), or NO_TEAM."""
    model: str
    """The deployment that served (its model_info id: the engine's or adapter's name)."""
    requests: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    spend_usd: float = 0.0


@dataclass(frozen=True, kw_only=True)
class SpendRecords:
    period: tuple[SpendGroup, ...]
    """Records that started within the period."""
    budget_window: tuple[SpendGroup, ...]
    """Records within each team's current budget window (requests and tokens unused)."""


@dataclass(frozen=True, kw_only=True)
class Period:
    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


@dataclass(frozen=True, kw_only=True)
class Row:
    """One tenant on one engine."""

    tenant: str
    tier: str
    engine: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    spend_usd: float
    """What LiteLLM recorded."""
    plan_usd: float | None
    """The same tokens at the Plan's prices; None for a model the Plan does not serve."""
    gpu_bill_usd: float
    """The tenant's share of the engine's GPU bill over the period."""
    gpu_bill_share: float
    budget_used: float | None
    """Spend on this engine within the tenant's current budget window, over its budget."""

    @property
    def price_agrees(self) -> bool:
        return self.plan_usd is not None and agrees(self.spend_usd, self.plan_usd)


def agrees(recorded_usd: float, priced_usd: float) -> bool:
    return abs(recorded_usd - priced_usd) <= max(ROUNDING_USD, 1e-6 * abs(priced_usd))


@dataclass(frozen=True, kw_only=True)
class TenantTotal:
    tenant: str
    tier: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    spend_usd: float
    gpu_bill_usd: float
    budget_usd: float | None
    budget_window: str | None
    budget_used: float | None


@dataclass(frozen=True, kw_only=True)
class EngineBill:
    engine: str
    usd_per_hour: float
    """The engine's floor of replicas, per hour (the Plan's)."""
    replica_hours: float
    """Replicas that ran, times hours: the floor throughout, or what Prometheus saw an autoscaled engine run."""
    bill_usd: float
    """Each replica-hour at the Plan's price of one replica's GPUs."""
    plan_usd: float
    """The tokens it served at the Plan's prices: the GPU time they took at full throughput, priced."""

    @property
    def utilisation(self) -> float:
        """Tokens served against what the GPUs could serve: a token's price is the GPU cost at full throughput."""
        return self.plan_usd / self.bill_usd if self.bill_usd else 0.0


@dataclass(frozen=True, kw_only=True)
class Showback:
    stack: str
    period: Period
    rows: tuple[Row, ...]
    tenants: tuple[TenantTotal, ...]
    engines: tuple[EngineBill, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def prices_agree(self) -> bool:
        return all(r.price_agrees for r in self.rows if r.requests)

    def to_dict(self) -> dict:
        return {
            "stack": self.stack,
            "since": self.period.start.isoformat() + "Z",
            "until": self.period.end.isoformat() + "Z",
            "hours": self.period.hours,
            "prices_agree": self.prices_agree,
            "rows": [{**asdict(r), "price_agrees": r.price_agrees} for r in self.rows],
            "tenants": [asdict(t) for t in self.tenants],
            "engines": [{**asdict(e), "utilisation": e.utilisation} for e in self.engines],
            "warnings": list(self.warnings),
        }


def showback(plan: Plan, period: Period, records: SpendRecords,
             replica_hours: dict[str, float] | None = None) -> Showback:
    """Spend per tenant and engine, each row checked against the Plan's prices; each engine's GPU bill
    (the replica-hours it ran, priced) split among its tenants by the GPU time their tokens took
    (their tokens at the Plan's prices); budget used within each tenant's current window.
    `replica_hours`, by engine, is what an autoscaled engine ran (read_replica_hours); an engine not in it
    is billed on its floor of replicas throughout, with a warning if it is autoscaled."""
    prices = model_prices(plan)
    warnings = _unknown(plan, prices, records)
    measured = replica_hours or {}
    warnings += [f"engine {e.name} is autoscaled ({e.replicas} to {e.autoscaling.max_replicas} replicas) and billed "
                 f"on its floor of {e.replicas}: the replicas the autoscaler added are not counted (give "
                 "--prometheus URL)" for e in plan.engines if e.autoscaling and e.name not in measured]
    used = _sum_by_engine(records.period, prices)
    in_window = {key: group.spend_usd for key, group in _sum_by_engine(records.budget_window, prices).items()}
    bills = {}
    for e in plan.engines:
        ran = measured.get(e.name, e.replicas * period.hours)
        bills[e.name] = EngineBill(engine=e.name, usd_per_hour=e.tokens.usd_per_hour, replica_hours=ran,
                                   bill_usd=e.tokens.usd_per_hour / e.replicas * ran,
                                   plan_usd=_plan_usd(used, prices, e.name))
    tenants = {t.name: t for t in plan.tenants}
    rows = []
    for tenant, engine in sorted(set(used) | set(in_window)):
        group = used.get((tenant, engine), SpendGroup(tenant=tenant, model=engine, requests=0))
        plan_usd = _price(prices, engine, group)
        bill = bills.get(engine)
        share = plan_usd / bill.plan_usd if bill and bill.plan_usd and plan_usd else 0.0
        budget = tenants[tenant].budget_usd if tenant in tenants else None
        rows.append(Row(
            tenant=tenant, tier=tenants[tenant].tier if tenant in tenants else "", engine=engine,
            requests=group.requests, prompt_tokens=group.prompt_tokens,
            completion_tokens=group.completion_tokens, spend_usd=group.spend_usd, plan_usd=plan_usd,
            gpu_bill_usd=bill.bill_usd * share if bill else 0.0, gpu_bill_share=share,
            budget_used=in_window.get((tenant, engine), 0.0) / budget if budget else None,
        ))
    warnings += [_disagreement(r) for r in rows if r.requests and r.plan_usd is not None and not r.price_agrees]
    return Showback(stack=plan.stack, period=period, rows=tuple(rows), tenants=_totals(plan, rows, in_window),
                    engines=tuple(bills.values()), warnings=tuple(warnings))


def _sum_by_engine(groups: Iterable[SpendGroup], prices: dict[str, ModelPrice]) -> dict[tuple[str, str], SpendGroup]:
    """Groups keyed by (tenant, engine): an engine's adapters are its own; a model the Plan does not
    serve keeps its name."""
    summed: dict[tuple[str, str], SpendGroup] = {}
    for g in groups:
        engine = prices[g.model].engine if g.model in prices else g.model
        was = summed.get((g.tenant, engine), SpendGroup(tenant=g.tenant, model=engine, requests=0))
        summed[(g.tenant, engine)] = SpendGroup(
            tenant=g.tenant, model=engine, requests=was.requests + g.requests,
            prompt_tokens=was.prompt_tokens + g.prompt_tokens,
            completion_tokens=was.completion_tokens + g.completion_tokens, spend_usd=was.spend_usd + g.spend_usd)
    return summed


def _price(prices: dict[str, ModelPrice], engine: str, group: SpendGroup) -> float | None:
    return prices[engine].cost(group.prompt_tokens, group.completion_tokens) if engine in prices else None


def _plan_usd(used: dict[tuple[str, str], SpendGroup], prices: dict[str, ModelPrice], engine: str) -> float:
    return sum(_price(prices, engine, g) for (_, e), g in used.items() if e == engine)


def _totals(plan: Plan, rows: list[Row], in_window: dict[tuple[str, str], float]) -> tuple[TenantTotal, ...]:
    tenants = {t.name: t for t in plan.tenants}
    by_tenant: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_tenant[row.tenant].append(row)
    totals = []
    for name, own in by_tenant.items():
        tenant = tenants.get(name)
        window_usd = sum(usd for (t, _), usd in in_window.items() if t == name)
        totals.append(TenantTotal(
            tenant=name, tier=own[0].tier, requests=sum(r.requests for r in own),
            prompt_tokens=sum(r.prompt_tokens for r in own), completion_tokens=sum(r.completion_tokens for r in own),
            spend_usd=sum(r.spend_usd for r in own), gpu_bill_usd=sum(r.gpu_bill_usd for r in own),
            budget_usd=tenant.budget_usd if tenant else None, budget_window=tenant.budget_window if tenant else None,
            budget_used=window_usd / tenant.budget_usd if tenant else None,
        ))
    return tuple(totals)


def _unknown(plan: Plan, prices: dict[str, ModelPrice], records: SpendRecords) -> list[str]:
    groups = (*records.period, *records.budget_window)
    tenants = {t.name for t in plan.tenants}
    teams = sorted({g.tenant for g in groups} - tenants - {NO_TEAM})
    models = sorted({g.model for g in groups} - set(prices))
    return ([f"team {t}: not a tenant of stack {plan.stack} (no tier, no budget)" for t in teams]
            + [f"model {m}: not served by stack {plan.stack}, so not priced and not in any GPU bill" for m in models])


def _disagreement(row: Row) -> str:
    return (f"{row.tenant} on {row.engine}: LiteLLM recorded {row.spend_usd:.6g} USD for {row.prompt_tokens} prompt "
            f"and {row.completion_tokens} output tokens; the Plan's prices make it {row.plan_usd:.6g} USD")


_MODEL = "COALESCE(NULLIF(s.model_id, ''), NULLIF(s.model_group, ''), s.model)"
_TEAM = f"COALESCE(t.team_alias, '{NO_TEAM}')"
_PERIOD_SQL = f"""
SELECT {_TEAM}, {_MODEL},
       COUNT(*) FILTER (WHERE s.status IS DISTINCT FROM 'failure'),
       COALESCE(SUM(s.prompt_tokens), 0), COALESCE(SUM(s.completion_tokens), 0), COALESCE(SUM(s.spend), 0)
FROM "LiteLLM_SpendLogs" s LEFT JOIN "LiteLLM_TeamTable" t ON t.team_id = s.team_id
WHERE s."startTime" >= %s AND s."startTime" < %s
GROUP BY 1, 2"""
_TEAMS_SQL = 'SELECT team_id, team_alias, budget_duration, budget_reset_at FROM "LiteLLM_TeamTable"'
_WINDOW_SQL = f"""
SELECT w.alias, {_MODEL}, COUNT(*), 0, 0, COALESCE(SUM(s.spend), 0)
FROM unnest(%s::text[], %s::text[], %s::timestamp[]) AS w(team_id, alias, since)
JOIN "LiteLLM_SpendLogs" s ON s.team_id = w.team_id AND s."startTime" >= w.since AND s."startTime" < %s
GROUP BY 1, 2"""


# Each request served: its request_id (the answer's `id`), tenant and spend.
REQUESTS_SQL = f"""
SELECT s.request_id, {_TEAM}, COALESCE(s.spend, 0)
FROM "LiteLLM_SpendLogs" s LEFT JOIN "LiteLLM_TeamTable" t ON t.team_id = s.team_id
WHERE s."startTime" >= %s AND s."startTime" < %s AND s.status IS DISTINCT FROM 'failure'"""


@contextmanager
def spend_database(database_url: str):
    """A cursor on LiteLLM's database; any database error, as a ShowbackError naming it (without its password)."""
    try:
        import psycopg
    except ImportError:
        raise ShowbackError("showback reads PostgreSQL with psycopg: pip install 'tenantry[gateway]'") from None
    try:
        with psycopg.connect(database_url, connect_timeout=10) as connection, connection.cursor() as cursor:
            yield cursor
    except psycopg.Error as error:
        raise ShowbackError(f"the spend records could not be read from {_redacted(database_url)}: "
                            f"{str(error).strip().splitlines()[0]}") from None


def read_spend(database_url: str, plan: Plan, period: Period) -> SpendRecords:
    """LiteLLM's spend records of the period, and of each team's current budget window: the window
    LiteLLM resets at the team's budget_reset_at, so it began one budget_duration before it (the
    Plan's window for a team without one). Times are UTC, as LiteLLM writes them."""
    windows = {t.name: t.budget_window for t in plan.tenants}
    with spend_database(database_url) as cursor:
        cursor.execute(_PERIOD_SQL, (period.start, period.end))
        used = tuple(_group(row) for row in cursor.fetchall())
        cursor.execute(_TEAMS_SQL)
        teams = [(team_id, alias, since) for team_id, alias, duration, reset_at in cursor.fetchall()
                 if alias and (since := _window_start(reset_at or period.end, duration, windows.get(alias)))]
        cursor.execute(_WINDOW_SQL, ([t[0] for t in teams], [t[1] for t in teams], [t[2] for t in teams],
                                     period.end))
        in_window = tuple(_group(row) for row in cursor.fetchall())
    return SpendRecords(period=used, budget_window=in_window)


REPLICA_STEP_SECONDS = 60
"""How often over the period the replicas are counted (Prometheus's subquery step): a replica that ran for less
than a step between two counts may be missed, one that stopped within a step counted to its end."""


def replica_hours_query(engine: EnginePlan, period: Period) -> str:
    """PromQL for the replica-hours an autoscaled engine ran over the period, evaluated at its end: vLLM's
    series counted at each step (one per serving replica), never fewer than the floor (its GPUs are held,
    serving or not, and a step where no replica reported is the floor's), averaged, times the hours."""
    count = f'count(vllm:num_requests_running{{model_name="{engine.name}"}})'
    at_least_floor = f"(clamp_min({count}, {engine.replicas}) or vector({engine.replicas}))"
    seconds = max(int(round((period.end - period.start).total_seconds())), REPLICA_STEP_SECONDS)
    return f"avg_over_time({at_least_floor}[{seconds}s:{REPLICA_STEP_SECONDS}s]) * {period.hours!r}"


def read_replica_hours(prometheus_url: str, plan: Plan, period: Period) -> dict[str, float]:
    """The replica-hours each autoscaled engine ran over the period, from Prometheus (engines of fixed size ran
    their replicas throughout: they are not asked for)."""
    import httpx

    found = {}
    for engine in (e for e in plan.engines if e.autoscaling):
        query = replica_hours_query(engine, period)
        try:
            answer = httpx.get(f"{prometheus_url.rstrip('/')}/api/v1/query", timeout=30,
                               params={"query": query, "time": f"{period.end.replace(tzinfo=UTC).timestamp():.3f}"})
            answer.raise_for_status()
            result = answer.json()["data"]["result"]
        except (httpx.HTTPError, ValueError, KeyError) as error:
            raise ShowbackError(f"the replicas engine {engine.name} ran could not be read from {prometheus_url}: "
                                f"{error}") from None
        if not result:
            raise ShowbackError(f"Prometheus at {prometheus_url} has no answer for engine {engine.name}'s "
                                f"replicas over the period: {query}")
        found[engine.name] = float(result[0]["value"][1])
    return found


def _window_start(ends: datetime, litellm_duration: str | None, plan_window: str | None) -> datetime | None:
    """When a team's budget window began: LiteLLM's duration when it is one tenantry writes, else the Plan's."""
    for duration in (litellm_duration, plan_window):
        if duration and re.match(WINDOW_PATTERN, duration):
            return before(ends, duration)
    return None


def _group(row: tuple) -> SpendGroup:
    tenant, model, requests, prompt, completion, spend = row
    return SpendGroup(tenant=tenant, model=model, requests=requests, prompt_tokens=int(prompt),
                      completion_tokens=int(completion), spend_usd=float(spend))


def _redacted(database_url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(//[^:/@]+):[^@]*@", r"\1:***@", database_url)
