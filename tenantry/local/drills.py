"""`tenantry local drill FAULT...`: a real failure on the local stack, and proof that
on-call hears of it and hears it end.

Each drill stops one part through supervisord (an engine, PostgreSQL or Redis, as
the gate's faults do), waits for every alert that failure must raise to reach the
local receiver (.local/alerts/received.jsonl, /page or /ticket as Alertmanager
routes it), starts the part again, waits until it is healthy, and waits for each
alert's resolve. Faults given together run together: their alerts are apart, and
the waits (each rule's `for`, its rate window, Alertmanager's grouping) overlap.

While a database or Redis is away, a guaranteed tenant keeps asking through the
gateway every few seconds, as traffic would: LiteLLM counts its failed calls to
PostgreSQL and Redis per call (litellm_postgres_failed_requests_total,
litellm_redis_failed_requests_total), which PostgresDown and RedisDown read.

postgres-down and redis-down together slow redis-down: a request whose key has left
LiteLLM's one-minute cache cannot be checked while PostgreSQL is away, so it never
reaches Redis, and Redis's failures are counted once PostgreSQL is back (measured on
the tests' stack, the three together: EngineDown 71 s after the stop, PostgresDown
141 s, RedisDown 281 s; resolved 10, 124 and 153 s after each part was back).

The waits are bounds, generous for a loaded two-core machine; what is judged is
that each alert arrived after its failure began and resolved after it ended."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import promql_parser as promql

from tenantry.local.alert_receiver import Notification, received
from tenantry.local.health import LocalStackError, wait_healthy
from tenantry.local.layout import HOST, Layout, State, engine_process, gateway_process
from tenantry.local.smoke import request_once
from tenantry.local.stack import status
from tenantry.local.supervisor import restart_engine_if_stopped, supervisorctl
from tenantry.monitoring.rules import rule_groups
from tenantry.plan.model import Plan
from tenantry.stacks import plan_stack

Progress = Callable[[str], None]

FIRING_MARGIN_SECONDS = 600
"""Beyond an alert's `for`: its failures counted (Redis's only once requests reach it again, below), its rate
window, a scrape, a rule evaluation and Alertmanager's group_wait, on a 2-core machine busy with engines."""
RESOLVE_WITHIN_SECONDS = 600
"""After the part is healthy again: the failures leaving the rules' 5-minute windows, a scrape, an
evaluation, Alertmanager's group_interval."""
TRAFFIC_EVERY_SECONDS = 5
PART_START_SECONDS = 120
"""How long PostgreSQL or Redis may take to answer again once supervisord starts it."""


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    alerts: tuple[str, ...]
    """Every alert the failure must raise (and resolve) on the local stack."""
    traffic: bool
    """Whether a tenant keeps asking meanwhile: the alerts count LiteLLM's failed calls."""


FAULTS = {f.name: f for f in (
    Fault("engine-down", "an engine stopped", ("EngineDown",), traffic=False),
    Fault("postgres-down", "PostgreSQL stopped", ("PostgresDown",), traffic=True),
    # GatewayPolicyFailSafe (a ticket) fires beside RedisDown, and resolves 5 minutes after the last
    # decision admission took without Redis: not waited for.
    Fault("redis-down", "Redis stopped", ("RedisDown",), traffic=True),
)}


@dataclass(frozen=True)
class Arrival:
    alert: str
    receiver: str
    """Where Alertmanager delivered it: /page or /ticket."""
    fired_after: float | None
    """Seconds from the stop to the firing notification; None if it never came."""
    resolved_after: float | None
    """Seconds from the part healthy again to the resolve; None if it never came."""
    waited_for: str
    """The rule's `for`."""
    firing: Notification | None = None
    """The firing notification as the receiver recorded it (labels, annotations)."""


@dataclass(frozen=True)
class DrillResult:
    fault: str
    part: str
    arrivals: tuple[Arrival, ...]

    @property
    def ok(self) -> bool:
        return all(a.fired_after is not None and a.resolved_after is not None for a in self.arrivals)


def run_drills(layout: Layout, faults: list[str], engine: str | None = None,
               progress: Progress = print) -> list[DrillResult]:
    """Each fault's drill, all at once; `engine` names the engine engine-down stops (default: the last)."""
    state = State.load(layout)
    if state is None or not layout.keys_file.exists():
        raise LocalStackError(f"no stack is up from {layout.root}: run `tenantry local up`")
    plan = plan_stack(state.spec)
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        raise LocalStackError(f"unknown fault {unknown}: choose from {', '.join(FAULTS)}")
    engine = engine or plan.engines[-1].name
    if engine not in {e.name for e in plan.engines}:
        raise LocalStackError(f"no engine {engine!r} in stack {state.stack}: {', '.join(e.name for e in plan.engines)}")
    lock = threading.Lock()

    def one_line(message: str) -> None:  # the drills' threads print their steps whole
        with lock:
            progress(message)

    with ThreadPoolExecutor(max_workers=len(faults), thread_name_prefix="drill") as pool:
        runs = [pool.submit(_drill, layout, state, plan, FAULTS[f], engine, one_line) for f in faults]
        return [run.result() for run in runs]


def _drill(layout: Layout, state: State, plan: Plan, fault: Fault, engine: str, progress: Progress) -> DrillResult:
    rules = {r["alert"]: r for g in rule_groups(plan) for r in g["rules"] if r.get("alert") in fault.alerts}
    missing = sorted(set(fault.alerts) - set(rules))
    if missing:
        raise LocalStackError(f"stack {state.stack} has no rule {missing} for {fault.name}")
    part = engine_process(engine) if fault.name == "engine-down" else fault.name.removesuffix("-down")
    labels = {"engine": engine} if fault.name == "engine-down" else {}
    quiet = _quiet(state, fault.alerts, labels, RESOLVE_WITHIN_SECONDS)
    if not quiet:
        raise LocalStackError(f"{fault.name}: {', '.join(fault.alerts)} still active in Prometheus after "
                              f"{RESOLVE_WITHIN_SECONDS} s: a drill starts from quiet (tenantry local status)")
    stop_traffic = threading.Event()
    stopped_at = time.time()
    progress(f"{fault.name}: {fault.what} ({part}); waiting for {', '.join(fault.alerts)}")
    try:
        supervisorctl(layout, "stop", part)
        if fault.traffic:
            threading.Thread(target=_ask_until, args=(layout, state, plan, stop_traffic), daemon=True).start()
        try:
            patience = max(for_seconds(r) for r in rules.values()) + FIRING_MARGIN_SECONDS
            firing = _wait(layout, stopped_at, patience, fault.alerts, labels,
                           lambda n: n.status == "firing" and n.starts_at >= stopped_at)
            progress(f"{fault.name}: {', '.join(sorted(firing)) or 'nothing'} arrived; starting {part} again")
        finally:
            _start(layout, plan, part, engine)
        healthy_at = time.time()
        resolved = _wait(layout, stopped_at, RESOLVE_WITHIN_SECONDS, tuple(firing), labels,
                         lambda n: n.status == "resolved" and n.starts_at == firing[n.labels["alertname"]].starts_at)
    finally:
        stop_traffic.set()
    progress(f"{fault.name}: {', '.join(sorted(resolved)) or 'nothing'} resolved")
    return DrillResult(fault.name, part, tuple(
        Arrival(name, firing[name].path if name in firing else "", firing[name].received_at - stopped_at
                if name in firing else None, resolved[name].received_at - healthy_at if name in resolved else None,
                rules[name].get("for", "0s"), firing.get(name))
        for name in fault.alerts))


def _wait(layout: Layout, since: float, seconds: float, alerts: tuple[str, ...], labels: dict[str, str],
          matches: Callable[[Notification], bool]) -> dict[str, Notification]:
    """The first notification of each alert (with `labels`) that `matches`, as far as `seconds` allow."""
    found: dict[str, Notification] = {}
    deadline = time.monotonic() + seconds
    while len(found) < len(alerts) and time.monotonic() < deadline:
        for n in received(layout.alerts_received, since):
            name = n.labels.get("alertname")
            if name in alerts and name not in found and matches(n) and \
                    all(n.labels.get(k) == v for k, v in labels.items()):
                found[name] = n
        time.sleep(2)
    return found


def _quiet(state: State, alerts: tuple[str, ...], labels: dict[str, str], seconds: float) -> bool:
    """Wait until Prometheus has none of `alerts` (with `labels`) pending or firing: one still firing from an
    earlier failure would never fire anew for this one. Whether they went quiet within `seconds`."""
    matchers = ",".join([f'alertname=~"{"|".join(alerts)}"', *(f'{k}="{v}"' for k, v in labels.items())])
    query = urllib.parse.urlencode({"query": f"ALERTS{{{matchers}}}"})
    url = f"http://{HOST}:{state.ports['prometheus']}/api/v1/query?{query}"
    deadline = time.monotonic() + seconds
    while True:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - the stack's own Prometheus
            if not json.loads(answer.read())["data"]["result"]:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(5)


def _start(layout: Layout, plan: Plan, part: str, engine: str) -> None:
    if part == engine_process(engine):
        restart_engine_if_stopped(layout, plan, engine)
        return
    supervisorctl(layout, "start", part)
    wait_healthy(part, lambda: any(row.name == part and row.healthy for row in status(layout)), PART_START_SECONDS)


def _ask_until(layout: Layout, state: State, plan: Plan, stop: threading.Event) -> None:
    """A guaranteed tenant's short request every TRAFFIC_EVERY_SECONDS until `stop` (answered or not)."""
    tenant = next((t for t in plan.tenants if t.tier == "guaranteed"), plan.tenants[0])
    key = json.loads(layout.keys_file.read_text())[tenant.name]
    url = f"http://{HOST}:{state.ports[gateway_process(0)]}/v1/chat/completions"
    while not stop.wait(TRAFFIC_EVERY_SECONDS):
        request_once(url, key, tenant.name, tenant.tier, tenant.traffic[0].target, timeout=TRAFFIC_EVERY_SECONDS * 4)


def for_seconds(rule: dict) -> float:
    """A rule's `for` in seconds (Prometheus's duration syntax, read by promql_parser; none is 0)."""
    duration = rule.get("for", "0s")
    return 0.0 if duration.strip("0smh") == "" else promql.parse_duration(duration).total_seconds()
