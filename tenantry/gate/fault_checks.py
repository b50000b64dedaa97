"""The checks of the fault scenarios (tenantry/gate/scenarios.py: engine-failure, engine-killed,
gateway-killed, database-outage, redis-outage, budget-exhausted): what was lost when a part of the
stack failed under load. Each says what it saw in figures."""

from __future__ import annotations

import re
import statistics

from tenantry.gate.records import Record
from tenantry.gate.scenario_model import Fault, Scenario
from tenantry.gate.spend import KILL_SETTLE_SECONDS
from tenantry.gate.verdict import Check, is_shed, served_by
from tenantry.gateway.tenant_policy_ledger import LEASE_SECONDS, RENEW_EVERY_SECONDS
from tenantry.plan.model import Plan

CLEAN_FAILURE_SECONDS = 10.0
"""A request in flight on a gateway replica that dies must have failed within this of its death:
the client sees the connection drop, not a hang."""
STOP_SETTLE_SECONDS = 15.0
"""A stop command runs as its stage starts; supervisord's SIGTERM has ended the engine within this
(vLLM took 8.6 s under the gate's load on the local stack; a request sent meanwhile may still reach it)."""
RECOVERY_SECONDS = 15.0
"""After PostgreSQL is back, how long the gateway may take to use it again."""
RELEASE_LAG_SECONDS = 2.0
"""A request's slot is released by LiteLLM's logging event a moment after its last byte; on the
local stack's busy cores, up to this long."""
ANSWER_LAG_SECONDS = 0.5
"""A response's slot is released just before its last byte leaves the gateway: counting the requests
a tenant had in flight from the client's side, a request ends this much earlier."""
CONCURRENCY_REFUSAL = re.compile(r"has \d+ requests in flight, its limit is \d+")
"""The plugin's message for a refusal at the tenant's concurrency (tenant_policy_decision)."""


def _ended(record: Record) -> float:
    return record.sent + record.e2e


def _failed(record: Record) -> bool:
    """A fault the client saw: no answer, a server error, or an answer that broke off. A 4xx is the
    gateway refusing the tenant for its own limits or capacity (a spent budget, a 429), not a fault."""
    return record.status == 0 or record.status >= 500 or (record.status == 200 and bool(record.error))


def _judged(name: str, problems: list[str], seen: str, passed: str) -> Check:
    """A check failing with its problems, or passing with `passed`; either way followed by what it saw."""
    if problems:
        return Check(name, False, "; ".join(problems) + f" ({seen})")
    return Check(name, True, f"{passed}; {seen}")


def unexplained_refusals(records: list[Record], plan: Plan) -> list[Record]:
    """Refusals for a tenant's concurrency while the gate had fewer of its requests in flight than
    its limit, counting as still in flight any that ended within RELEASE_LAG_SECONDS before (a
    slot is released a moment after the last byte): slots held by requests no client is waiting
    for, such as a dead replica's."""
    limits = {t.name: t.max_concurrency for t in plan.tenants}
    refused = [r for r in records if r.status == 429 and not is_shed(r) and CONCURRENCY_REFUSAL.search(r.error)]
    unexplained = []
    for refusal in refused:
        holding = sum(1 for r in records if r.tenant == refusal.tenant and r is not refusal and r.status != 429
                      and r.sent <= refusal.sent <= _ended(r) + RELEASE_LAG_SECONDS)
        if holding < limits[refusal.tenant]:
            unexplained.append(refusal)
    return unexplained


ENGINE_FAULTS = {"stop-engine": STOP_SETTLE_SECONDS, "kill-engine": KILL_SETTLE_SECONDS}
"""The faults that take an engine away, each with how long after its stage starts a request may
still reach the engine (a SIGKILL is immediate; supervisord's SIGTERM takes seconds)."""
COMPLETE_FINISH_REASONS = ("stop", "length")
"""What a whole answer ends with; anything else (none, "abort") is an answer cut short. LiteLLM ends
a stream its backend left without a finish reason with "stop" of its own, so an answer is also
judged by its tokens (the gate asks for exactly max_tokens)."""


def engine_fault(scenario: Scenario) -> tuple[Fault, float, float] | None:
    """The scenario's fault that takes an engine away: the fault, when its command started, and
    until when a request may still have reached the engine."""
    for kind, settle in ENGINE_FAULTS.items():
        found = scenario.fault_at(kind)
        if found:
            return found[0], found[1], max(found[1] + settle, scenario.fault_done(kind) + KILL_SETTLE_SECONDS)
    return None


def _in_flight_at_fault(records: list[Record], plan: Plan, scenario: Scenario) -> list[Record]:
    found = engine_fault(scenario)
    if found is None:
        return []
    fault, at, reach = found
    models = served_by(plan, fault.subject)
    return [r for r in records if r.target in models and r.sent < reach and _ended(r) >= at]


def cut_by_an_engine_fault(records: list[Record], plan: Plan, scenario: Scenario) -> list[Record]:
    """Requests to the stopped or killed engine (its model or adapters) in flight as it went that
    failed: a stream already under way cannot move to the fallback, so it ends with an error event.
    They are the fault itself, judged by fallback-served (a clean end within CLEAN_FAILURE_SECONDS
    of the engine's), not counted in the tenants' error rates (docs/decisions.md: Streams cut by a
    stopped engine are the fault, not the tenant's errors)."""
    return [r for r in _in_flight_at_fault(records, plan, scenario) if _failed(r)]


def _unclean(record: Record) -> bool:
    """A failure the client cannot tell from a network fault: no status, or a stream that broke off
    without the gateway's error event."""
    return record.status == 0 or record.stream_end == "cut"


def check_fallback(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """Requests to the lost engine sent after it went are answered by its fallback (or by the engine
    once its supervisor has started it again); those in flight as it went either completed whole or
    fail promptly and cleanly, with a status or an error event (cut_by_an_engine_fault)."""
    engine, fallbacks = scenario.subject["engine"], scenario.subject["fallback"].split(",")
    fault, failed_at, reach = engine_fault(scenario)
    went = "was killed" if fault.kind == "kill-engine" else "stopped"
    models = served_by(plan, engine)
    after = [r for r in records if r.target in models and r.sent >= failed_at]
    by_fallback = [r for r in after if r.ok and any(f in r.served_by for f in fallbacks)]
    # A killed engine is started again by its supervisor: it is down from the kill until the first request sent
    # once the kill had surely landed (`reach`) that it answers itself. A stopped one stays down.
    back = min((r.sent for r in after if r.ok and r not in by_fallback and r.sent >= reach),
               default=None) if fault.kind == "kill-engine" else None
    down = [r for r in after if (back is None or r.sent < back) and not (r.ok and r not in by_fallback)]
    served = [r for r in down if r in by_fallback]
    in_flight = _in_flight_at_fault(records, plan, scenario)
    cut = [r for r in in_flight if _failed(r)]  # cut_by_an_engine_fault, which the verdict leaves out
    whole = [r for r in in_flight if r.ok]
    truncated = [r for r in whole if r.finish_reason not in COMPLETE_FINISH_REASONS or r.output_tokens < r.max_tokens]
    hung = [r for r in cut if _ended(r) > reach + CLEAN_FAILURE_SECONDS]
    unclean = [r for r in cut if _unclean(r)]
    slowest = max((_ended(r) - failed_at for r in cut), default=0)
    seen = (f"{len(cut)} in flight as it {went} failed within {slowest:.1f} s"
            + (f" (first: {cut[0].error[:100]})" if cut else "") + f", not counted in error rates; {len(whole)} "
            f"completed whole")
    problems = [] if served or (after and not down) else [
        f"none of its {len(down)} requests while it was down were answered by {', '.join(fallbacks)}"]
    if after and not down:  # none in that window: the fallback is engine-failure's to show here, not a loss
        seen += f"; no request reached it before it answered again, {back - failed_at:.1f} s after it {went}"
    if fault.mid_stream and not cut:
        problems.append("no stream under way was cut: nothing shows how one ends")
    if hung:
        problems.append(f"{len(hung)} request(s) in flight as it {went} took more than "
                        f"{reach - failed_at + CLEAN_FAILURE_SECONDS:g} s to fail")
    if unclean:
        problems.append(f"{len(unclean)} request(s) in flight as it {went} broke off without a status or an error "
                        f"event (first: {unclean[0].error[:100]})")
    if truncated:
        problems.append(f"{len(truncated)} answer(s) in flight as it {went} ended as a success cut short, without a "
                        f"finish reason of {' or '.join(COMPLETE_FINISH_REASONS)} or the tokens asked for (first: "
                        f"{truncated[0].finish_reason or 'none'}, {truncated[0].output_tokens} of "
                        f"{truncated[0].max_tokens or '?'} tokens)")
    if problems:
        return Check("fallback-served", False, f"after engine {engine} {went}, " + "; ".join(problems) + f"; {seen}")
    return Check("fallback-served", True, f"after engine {engine} {went}, {len(served)} of its {len(down)} "
                 f"requests while it was down were answered by {', '.join(fallbacks)}; {seen}")


def check_gateway_killed(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """The survivor's clients see no failure; requests in flight on the killed replica either
    completed whole before it died or fail promptly; the dead replica's concurrency slots are free
    again once its leases lapse: no tenant is refused for its concurrency for slots no live
    request holds after that."""
    fault, killed_at = scenario.fault_at("kill-gateway")
    dead = int(fault.subject)
    problems = []
    on_survivors = [r for r in records if r.gateway != dead and _failed(r)]
    if on_survivors:
        problems.append(f"{len(on_survivors)} request(s) to the surviving gateway(s) failed "
                        f"(first: {on_survivors[0].error[:120] or on_survivors[0].status})")
    cut = [r for r in records if r.gateway == dead and r.sent < killed_at + KILL_SETTLE_SECONDS < _ended(r)
           and not r.ok]
    slow = [r for r in cut if _ended(r) > killed_at + CLEAN_FAILURE_SECONDS]
    if slow:
        problems.append(f"{len(slow)} request(s) in flight on the killed replica took more than "
                        f"{CLEAN_FAILURE_SECONDS:g} s to fail (longest {max(_ended(r) for r in slow) - killed_at:.0f} s)")
    freed_by = killed_at + LEASE_SECONDS + RENEW_EVERY_SECONDS
    held = [r for r in unexplained_refusals(records, plan) if r.sent > killed_at]
    late = [r for r in held if r.sent > freed_by]
    if late:
        problems.append(f"{len(late)} request(s) refused for concurrency their tenant was not using, more than "
                        f"{freed_by - killed_at:.0f} s after the kill (last {late[-1].sent - killed_at:.0f} s after)")
    redirected = sum(1 for r in records if r.gateway == dead and r.sent >= killed_at + KILL_SETTLE_SECONDS
                     and r.status == 0)
    seen = (f"{len(cut)} request(s) in flight on replica {dead} were cut, all within "
            f"{max((_ended(r) - killed_at for r in cut), default=0):.1f} s of the kill; {redirected} sent to it "
            f"afterwards were refused a connection and their clients moved on; the dead replica's slots refused "
            f"{len(held)} request(s), the last {max((r.sent - killed_at for r in held), default=0):.0f} s after the kill")
    survivors = sum(1 for r in records if r.gateway != dead)
    return _judged("gateway-killed", problems, seen, f"{survivors} request(s) to the survivor, none failed")


def check_database_outage(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """Keys keep authenticating while PostgreSQL is away (LiteLLM's key cache), no request hangs
    for want of it, and once it is back every request is answered again. Spend written after
    the outage is judged by spend-reconciles, as in every run."""
    _, stopped_at = scenario.fault_at("stop-postgres")
    back_at, back = scenario.fault_undone("stop-postgres")
    during = [r for r in records if stopped_at <= r.sent < back_at]
    problems = []
    unauthenticated = [r for r in records if r.status == 401]
    if unauthenticated:
        problems.append(f"{len(unauthenticated)} request(s) refused as unauthenticated (first at "
                        f"{unauthenticated[0].sent - stopped_at:+.0f} s from the outage): {unauthenticated[0].error[:120]}")
    hung = [r for r in records if r.status == 0]
    if hung:
        problems.append(f"{len(hung)} request(s) got no answer at all (first: {hung[0].error[:120]})")
    after = [r for r in records if r.sent >= back + RECOVERY_SECONDS and _failed(r)]
    if after:
        problems.append(f"{len(after)} request(s) failed more than {RECOVERY_SECONDS:g} s after PostgreSQL was back "
                        f"(first: {after[0].error[:120]})")
    ok = sum(1 for r in during if r.ok)
    seen = f"during the outage {ok} of {len(during)} request(s) were answered, {sum(map(_failed, during))} failed"
    if problems:
        return Check("database-outage", False, "; ".join(problems) + f" ({seen})")
    return Check("database-outage", True, f"{seen}, each with a status and a message; keys kept authenticating; "
                                          "every request after the recovery was answered")


def peak_in_flight(records: list[Record], tenant: str, start: float, end: float) -> int:
    """The most answered requests of the tenant in flight at once, among those sent and ended within
    [start, end] (each counted as ended ANSWER_LAG_SECONDS early)."""
    spans = [(r.sent, _ended(r) - ANSWER_LAG_SECONDS) for r in records
             if r.tenant == tenant and r.ok and start <= r.sent and _ended(r) <= end]
    return max((sum(1 for s, e in spans if s <= sent < e) for sent, _ in spans), default=0)


def _first_token(record: Record) -> float:
    return record.sent + record.e2e if record.first_token_at is None else record.first_token_at


def _served_while_away(records: list[Record], refused: list[Record], away: tuple[float, float],
                       restarted_at: float) -> tuple[list[Record], list[Record]]:
    """Lower-tier requests a replica served inside its own window of refusals for Redis: those admitted while Redis
    was away (a breach), and those that may have been admitted once it was back (reported).

    Each replica finds Redis gone on its next call to it: one that refused is judged by its own first and
    last refusal (the soak saw a spot request served on one replica 0.1 s after the other's first refusal),
    from when its first refusal was answered: a fresh clone of 8431c26 had a best-effort request served that
    was sent 0.4 s after the first refusal was sent, before that refusal's answer (0.7 s) came back. Admission
    may wait on Redis for a while: a loaded clone of ac336f9 served a request sent 0.1 s before its replica's last
    refusal, 1.6 s before Redis was started again. A request is admitted before its first token, so one whose
    first token came before the command to start Redis again was admitted without Redis; one whose first token
    came after it may have been admitted by Redis back."""
    by_replica = {g: [r for r in refused if r.gateway == g] for g in {r.gateway for r in refused}}
    windows = {g: (min(r.sent + r.e2e for r in mine), max(r.sent for r in mine)) for g, mine in by_replica.items()}
    inside = [r for r in records if r.tier != "guaranteed" and r.ok
              and windows.get(r.gateway, away)[0] < r.sent < windows.get(r.gateway, away)[1]]
    return ([r for r in inside if _first_token(r) < restarted_at],
            [r for r in inside if _first_token(r) >= restarted_at])


def check_redis_outage(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """Admission's fail-safe while Redis is away (docs/platform.md: Admission): guaranteed tenants are
    never refused for capacity and always answered (an engine's 5xx is reported: it is not admission's; so is a
    refusal, while Redis answers, of a request beyond its tenant's reservation on an engine, which the Plan allows);
    the other tiers are refused (429, X-Tenantry-Shed: redis) from the answer to each replica's first such
    refusal to the sending of its last (the gateway's own word on when Redis was away: a stop command may take
    seconds, each replica finds out on its next call, and a request sent while an earlier one still waited on
    Redis may have been answered by it, as may one whose first token came after the command to start Redis again:
    _served_while_away); RECOVERY_SECONDS after that command returned nobody is refused for it.
    How many requests a guaranteed tenant had in flight is reported from the client's side, not
    judged: LiteLLM's own Redis calls add seconds outside admission during an outage, so the client's
    view overstates the gateway's count (the per-replica bound is the plugin's, tested on it)."""
    _, stopped_at = scenario.fault_at("stop-redis")
    restarted_at, restarted = scenario.fault_undone("stop-redis")
    problems = []
    # With Redis, a guaranteed request beyond the slots its tenant reserved on an engine takes a shared slot or
    # is refused (shared-slots), as the Plan says: reported, not judged. Without Redis nothing may refuse it.
    beyond = [r for r in records if r.tier == "guaranteed" and r.shed == "shared-slots"
              and not stopped_at <= r.sent <= restarted_at]
    blocked = [r for r in records if r.tier == "guaranteed" and (is_shed(r) or r.status == 0) and r not in beyond]
    if blocked:
        problems.append(f"{len(blocked)} guaranteed request(s) refused for capacity or unanswered (first at "
                        f"{blocked[0].sent - stopped_at:+.0f} s from the outage: {blocked[0].error[:120]})")
    failed = [r for r in records if r.tier == "guaranteed" and _failed(r) and r.status != 0]
    refused = sorted((r for r in records if r.shed == "redis"), key=lambda r: r.sent)
    if not refused:
        problems.append("no lower-tier request was refused for Redis: the outage was not seen")
    away = (refused[0].sent, refused[-1].sent) if refused else (restarted_at, restarted_at)
    served, admitted_after = _served_while_away(records, refused, away, restarted_at)
    if served:
        problems.append(f"{len(served)} {served[0].tier} request(s) served while Redis was away (first: "
                        f"{served[0].tenant} sent at {served[0].sent - stopped_at:+.1f} s on gateway {served[0].gateway}, "
                        f"its first token at {_first_token(served[0]) - stopped_at:+.1f} s; the command to start "
                        f"Redis again at {restarted_at - stopped_at:+.1f} s)")
    late = [r for r in records if r.sent >= restarted + RECOVERY_SECONDS and (r.shed == "redis" or _failed(r))]
    if late:
        problems.append(f"{len(late)} request(s) refused for Redis or failed more than {RECOVERY_SECONDS:g} s after "
                        f"it was back")
    peaks = [f"{t.name} peaked at {peak_in_flight(records, t.name, *away)} in flight while Redis was away (bound "
             f"{plan.gateway.replicas * t.max_concurrency}: {plan.gateway.replicas} replicas x {t.max_concurrency}), "
             f"{peak_in_flight(records, t.name, restarted + RECOVERY_SECONDS, scenario.seconds)} after"
             for t in plan.tenants if t.tier == "guaranteed"]
    seen = (f"Redis away from {away[0] - stopped_at:+.1f} s to {away[1] - stopped_at:+.1f} s of the stop: "
            f"{len(refused)} lower-tier request(s) refused with X-Tenantry-Shed: redis (median answer "
            f"{statistics.median(r.e2e for r in refused) if refused else 0:.2f} s); " + "; ".join(peaks)
            + " (client's view)")
    if beyond:
        seen += (f"; {len(beyond)} guaranteed request(s) beyond their tenant's reservation on an engine refused for its "
                 f"shared slots while Redis answered, as the Plan allows (first: {beyond[0].error[:100]})")
    if admitted_after:
        seen += (f"; {len(admitted_after)} lower-tier request(s) sent while Redis was away had their first token only "
                 f"after the command to start it again, so may have been admitted once it was back (first: sent at "
                 f"{admitted_after[0].sent - stopped_at:+.1f} s, first token at "
                 f"{_first_token(admitted_after[0]) - stopped_at:+.1f} s)")
    if failed:  # an engine's error reaches a guaranteed tenant with or without Redis: the SLO's business
        seen += f"; {len(failed)} guaranteed request(s) failed on their way to the engine (first: {failed[0].error[:100]})"
    return _judged("redis-outage", problems, seen, "no guaranteed request refused for capacity or left unanswered")


BUDGET_REFUSAL = re.compile(r"budget", re.IGNORECASE)
"""LiteLLM's refusal of a spent budget: 400 or 422 (1.108), "Budget has been exceeded! ..."."""
BUDGET_RESTORED_SECONDS = 5.0
"""After the budget is restored, how long a request already sent may still be refused for it."""


def check_budget_exhausted(records: list[Record], plan: Plan, scenario: Scenario) -> Check:
    """Once the spender's capped budget is spent, its next request and every one after it is refused
    with a 4xx that says so, and nothing else of its fails; the requests it had in flight are answered
    (spend-reconciles proves each was charged, so the spend recorded never falls short of the tokens
    served); once the budget is restored it is served again. Tenants are reported, not judged."""
    spender = scenario.subject["spender"]
    fault, capped_at = scenario.fault_at("exhaust-budget")
    # The restore's command started at restored_at and had returned by restore_done (it takes about a second):
    # a request sent between them may be served or refused.
    restored_at, restore_done = scenario.fault_times.get("restore-budget", (capped_at + (fault.seconds or 0),) * 2)
    mine = [r for r in records if r.tenant == spender]
    budget_refusals = [r for r in mine if 400 <= r.status < 500 and BUDGET_REFUSAL.search(r.error)]
    refused = [r for r in budget_refusals if r.sent >= capped_at]
    if not refused:
        served = sum(1 for r in mine if capped_at <= r.sent < restored_at and r.ok)
        return Check("budget-exhausted", False, f"{spender}'s budget never ran out: none of its requests was refused "
                     f"for it; {served} were served between the cap and the restore")
    first = min(refused, key=lambda r: r.sent)  # records are in the order they ended
    # Each replica judges the team by its own cached spend, so each is judged from its own first refusal:
    # CI saw one replica serve a request sent 0.0 s after the other's first refusal.
    first_on = {g: min(r.sent for r in refused if r.gateway == g) for g in {r.gateway for r in refused}}
    problems = []
    after = sorted((r for r in mine if r.ok and r.sent < restored_at
                    and first_on.get(r.gateway, first.sent) < r.sent), key=lambda r: r.sent)
    if after:
        problems.append(f"{len(after)} request(s) sent after its budget ran out on their replica were served (first "
                        f"{after[0].sent - first_on.get(after[0].gateway, first.sent):.1f} s after gateway-"
                        f"{after[0].gateway}'s first refusal)")
    early = len(budget_refusals) - len(refused)
    if early:
        problems.append(f"{early} request(s) refused for its budget before the cap (spent by earlier runs?)")
    other = [r for r in mine if not r.ok and r not in budget_refusals and not is_shed(r) and r.status != 429]
    if other:
        problems.append(f"{len(other)} of its request(s) failed otherwise (first: HTTP {other[0].status} "
                        f"{other[0].error[:120]})")
    late = [r for r in refused if r.sent > restore_done + BUDGET_RESTORED_SECONDS]
    back = [r for r in mine if r.sent > restored_at and r.ok]
    if late or not back:
        problems.append(f"after the restore, {len(back)} served and {len(late)} refused for its budget")
    in_flight = [r for r in mine if r.sent < first.sent < _ended(r)]
    replicas = ", ".join(f"gateway-{g} from {at - capped_at:.1f} s" for g, at in sorted(first_on.items()))
    seen = (f"{spender} was refused {len(refused)} time(s) for its budget ({replicas} after the cap; "
            f"HTTP {', '.join(sorted({str(r.status) for r in refused}))}: {first.error[:100]}); "
            f"{sum(1 for r in in_flight if r.ok)} of the {len(in_flight)} request(s) in flight then were answered "
            f"(charged: spend-reconciles); {len(back)} served after the restore")
    return _judged("budget-exhausted", problems, seen, "no request sent after its replica's first refusal was served")


CHECKS = {
    "fallback-served": check_fallback,
    "gateway-killed": check_gateway_killed,
    "database-outage": check_database_outage,
    "redis-outage": check_redis_outage,
    "budget-exhausted": check_budget_exhausted,
}
