"""The Locust side of the gate: one user class per tenant traffic profile, the scenario as a LoadTestShape, and
a quitting listener that writes the measured requests and the verdict and sets the exit code. Run by `tenantry
gate`, which writes the run's settings to run.json and points TENANTRY_GATE_RUN at it; `locust -f
tenantry/gate/locustfile.py --headless` with that variable set works the same way."""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import replace
from itertools import count
from pathlib import Path

import gevent
import gevent.event
import requests
from locust import LoadTestShape, User, events, task

from tenantry.gate import profiles
from tenantry.gate.connection import Connection
from tenantry.gate.engine_load import busy_by_stage, sample_engines, write_samples
from tenantry.gate.fault_agent import agent_command
from tenantry.gate.records import (VERDICT_JSON, Record, error_message, retry_after_seconds, token_gaps,
                                   write_records)
from tenantry.gate.scenario_model import MID_STREAM_WAIT_SECONDS, Fault, Scenario, Stage, with_stage_seconds
from tenantry.gate.scenarios import scenario as build_scenario
from tenantry.gate.target import run_fault_command
from tenantry.gate.verdict import REROUTE_HEADER, SHED_HEADER, served_by, verdict
from tenantry.plan.model import Plan, TrafficPlan
from tenantry.showback import ModelPrice, model_prices
from tenantry.stacks import plan_stack

RUN = json.loads(Path(os.environ["TENANTRY_GATE_RUN"]).read_text(encoding="utf-8"))
OUT = Path(RUN["out"])
PLAN: Plan = plan_stack(Path(RUN["stack"]))
SCENARIO: Scenario = replace(with_stage_seconds(build_scenario(RUN["scenario"], PLAN, short=RUN["short"],
    tenant=RUN.get("tenant")), RUN.get("stage_seconds")), latency_judged=RUN.get("latency_judged", True))
KEYS: dict[str, str] = json.loads(Path(RUN["keys"]).read_text(encoding="utf-8"))
PRICES: dict[str, ModelPrice] = model_prices(PLAN)
GATEWAYS: list[str] = RUN["gateways"]
PROMPT_SEED: str = RUN.get("prompt_seed", "")  # the run's own, or "" to repeat every run's prompts (run.py)
TIMEOUT = (5, 300)  # connect, read: a queued request on a saturated CPU engine may wait long

DRAIN_SECONDS = 30.0
"""After the last stage, how long requests still running may finish, so that every request the
gateway charges is recorded with its cost (docs/showback.md, "Checked against the gate"); one
still running then is cut, unrecorded, and the run's actions say so."""

RECORDS: list[Record] = []
ENGINE_SAMPLES: list = []  # engine_load.EngineSample, where the target knows the engines' /metrics
ACTIONS: list[dict] = []
PENDING_RESTORES: dict[str, str] = {}
"""Restores (RESTORES) of faults done and not yet undone, with their subjects."""
STARTED = {"at": time.monotonic()}
IN_FLIGHT = {"requests": 0}
STREAMING: set[int] = set()
"""Streams under way (their first token came), by id(record)."""
PROBE_STREAMS: set[int] = set()
"""The gate's own streams (_one_stream), by id(record)."""


def elapsed() -> float:
    return time.monotonic() - STARTED["at"]


def current_stage() -> Stage | None:
    return SCENARIO.stage_at(elapsed())


# --- one request ----------------------------------------------------------------------------


def send(connection: Connection, url: str, key: str, body: dict, record: Record) -> Record:
    """Send one chat completion and time it: first token, the gaps between tokens, the end."""
    start = time.monotonic()
    first = last = None
    session = connection.get()
    IN_FLIGHT["requests"] += 1
    try:
        with session.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                          stream=body["stream"], timeout=TIMEOUT) as response:
            record.status, record.rerouted = response.status_code, response.headers.get(REROUTE_HEADER, "")
            if response.status_code != 200:
                record.error = error_message(response)
                record.shed = response.headers.get(SHED_HEADER, "")
                record.retry_after = retry_after_seconds(response.headers.get("Retry-After", ""))
            elif not body["stream"]:
                answer = response.json()
                first = last = time.monotonic()
                record.read_usage(answer, PRICES)
            else:
                visible: list[float] = []
                done = False
                for line in response.iter_lines(decode_unicode=True):
                    done = done or line == "data: [DONE]"
                    if not line or not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        record.error = str(chunk["error"])[:500]
                        record.stream_end = "error event"
                        break
                    deltas = [c.get("delta") or {} for c in chunk.get("choices", [])]
                    now = time.monotonic()
                    if first is None and deltas:
                        first = now  # vLLM sends its first chunk (the role) with the first token
                        STREAMING.add(id(record))
                    if any(d.get("content") for d in deltas):
                        visible.append(now)
                    if deltas:
                        last = now
                    record.read_usage(chunk, PRICES)
                record.stream_end = "[DONE]" if done else record.stream_end or "cut"
                if first is None and not record.error:
                    record.error = "the stream carried no tokens"
                if not done and not record.error:  # a stream cut short is never a success
                    record.error = "the stream ended without [DONE]"
                if not record.output_tokens:
                    record.output_tokens = len(visible)
                record.gaps = token_gaps(first, last, visible, record.output_tokens)
    except (requests.RequestException, ValueError) as error:
        record.error = f"{type(error).__name__}: {error}"[:500]
        if body["stream"] and record.status == 200:
            record.stream_end = "cut"  # broke off mid-stream
    finally:
        IN_FLIGHT["requests"] -= 1
        STREAMING.discard(id(record))
    connection.done()
    record.e2e = time.monotonic() - start
    if first is not None:
        record.ttft = first - start
    return record


def report_to_locust(user: User, record: Record) -> None:
    """Locust's own statistics and CSVs: end-to-end latency, and time to first token as its own type."""
    name = f"{record.tenant}:{record.profile}"
    failure = None if record.ok else Exception(f"HTTP {record.status}: {record.error[:120]}")
    user.environment.events.request.fire(request_type="E2E", name=name, response_time=record.e2e * 1000,
                                         response_length=record.output_tokens, exception=failure, context={})
    if record.ttft is not None:
        user.environment.events.request.fire(request_type="TTFT", name=name, response_time=record.ttft * 1000,
                                             response_length=0, exception=None, context={})


# --- users ----------------------------------------------------------------------------------


def class_load(traffic: profiles.TrafficClass, stage: Stage) -> tuple[int, float]:
    """(users of this class, seconds between one user's requests; 0 back to back) in a stage."""
    load = stage.loads.get(traffic.tenant)
    return load.of_class(traffic.targets, PLAN.tenant(traffic.tenant).traffic) if load else (0, 0.0)


class TenantUser(User):
    """Sends one tenant's traffic of one profile while the stage gives it load;
    idles otherwise. Arrivals are a Poisson process at the stage's rate."""

    abstract = True
    traffic: profiles.TrafficClass
    counter: count

    def on_start(self) -> None:
        self.index = next(type(self).counter)
        self.tenant = PLAN.tenant(self.traffic.tenant)
        self.key = KEYS[self.tenant.name]
        self.gateway = self.index % len(GATEWAYS)
        self.rng = random.Random(f"{PROMPT_SEED}{self.traffic.name}:{self.index}")
        self.connection = Connection()
        self.next_at = 0.0

    def on_stop(self) -> None:
        self.connection.close()

    @task
    def one_request(self) -> None:
        stage = current_stage()
        users, interval = class_load(self.traffic, stage) if stage else (0, 0.0)
        if self.index >= users:
            gevent.sleep(0.25)
            return
        now = elapsed()
        if interval:
            if self.next_at == 0.0:
                self.next_at = now + self.rng.uniform(0, interval)  # spread the users' first requests
            if now < self.next_at:
                gevent.sleep(min(self.next_at - now, 0.25))
                return
            self.next_at = max(self.next_at + self.rng.expovariate(1 / interval), now - interval)
        weights = stage.loads[self.tenant.name].weights(self.traffic.targets)
        entry = self.rng.choices(self.traffic.targets, weights=weights)[0]
        body = profiles.request_body(self.tenant, entry, self.rng, stream=True if SCENARIO.stream_all else None,
                                     output_scale=SCENARIO.output_scale_of(self.tenant.name), run_seed=PROMPT_SEED)
        record = Record(self.tenant.name, self.tenant.tier, self.traffic.profile, entry.target, stage.name, now,
                        body["stream"], 0, 0.0, gateway=self.gateway, max_tokens=body["max_tokens"])
        RECORDS.append(send(self.connection, GATEWAYS[self.gateway], self.key, body, record))
        report_to_locust(self, record)
        if record.status == 0 and record.error.startswith("ConnectionError"):
            # As a load balancer would stop sending to a gateway that refuses connections.
            self.gateway = (self.gateway + 1) % len(GATEWAYS)
            self.connection.close()
            self.connection = Connection()
        if record.status == 429:
            self.back_off(record, interval)

    def back_off(self, record: Record, interval: float) -> None:
        """A refused client waits as the official OpenAI SDK does: the Retry-After the gateway sent,
        else a second, instead of spinning (docs/decisions.md: Refused gate clients honour Retry-After)."""
        wait = record.retry_after or 1.0
        if interval:
            self.next_at = max(self.next_at, elapsed() + wait)  # its arrivals resume after the wait
        else:
            gevent.sleep(wait)


class CacheProbeUser(User):
    """The cache-isolation probes, one pair at a time: a fresh long prompt from
    one tenant, then the same from the other, each to the same model. Each
    tenant's probes stay within half its contract rate, so the probes never
    spend a tenant's quota (the scenario's background load takes a quarter)."""

    abstract = True
    fixed_count = 1

    def on_start(self) -> None:
        self.connection = Connection()
        self.rng = random.Random(f"{PROMPT_SEED}cache-probes")
        self.round = 0
        self.next_allowed: dict[str, float] = {}

    @task
    def probe_pairs(self) -> None:
        if current_stage() is None:
            gevent.sleep(0.25)
            return
        self.round += 1
        for first, second, model in SCENARIO.cache_probes:
            pair = f"{first}/{second}/{model}/{self.round}"
            prompt = f"probe {pair} " + profiles.words(self.rng, 300)  # fresh: its first words are new
            for order, tenant_name in (("first", first), ("second", second)):
                stage = current_stage()
                if stage is None:
                    return
                tenant = PLAN.tenant(tenant_name)
                while elapsed() < self.next_allowed.get(tenant.name, 0.0):
                    gevent.sleep(0.1)
                self.next_allowed[tenant.name] = elapsed() + 2 / tenant.contract_requests_per_second
                entry = TrafficPlan(target=model, engine=model, adapter=None, share=1.0, profile="chat", tpm=0,
                                    concurrency=0)
                body = profiles.request_body(tenant, entry, self.rng, stream=False, prompt=prompt)
                body["max_tokens"] = 4
                record = Record(tenant.name, tenant.tier, "cache-probe", model, stage.name, elapsed(), False, 0, 0.0,
                                probe=f"{pair}:{order}")
                RECORDS.append(send(self.connection, GATEWAYS[0], KEYS[tenant.name], body, record))
                report_to_locust(self, record)
            gevent.sleep(0.2)


def _user_classes() -> dict[str, type[User]]:
    classes: dict[str, type[User]] = {}
    for traffic in profiles.traffic_classes(PLAN):
        most = max(class_load(traffic, stage)[0] for stage in SCENARIO.stages)
        if most:
            name = "".join(part.capitalize() for part in traffic.name.replace("_", "-").split("-")) + "User"
            classes[name] = type(name, (TenantUser,), {"traffic": traffic, "counter": count(),
                                                       "fixed_count": most, "abstract": False})
    if SCENARIO.cache_probes:
        classes["CacheProbes"] = type("CacheProbes", (CacheProbeUser,), {"abstract": False})
    return classes


USER_CLASSES = _user_classes()
globals().update(USER_CLASSES)  # Locust finds user classes among the module's names
TOTAL_USERS = sum(cls.fixed_count for cls in USER_CLASSES.values())


# --- the scenario's shape, and its actions ----------------------------------------------------


def run_fault(fault: Fault) -> None:
    """Do the fault with the target's command (mid-stream: once a stream is under way); undo it after its seconds."""
    command_done = gevent.event.Event()
    if fault.mid_stream:
        _stream_until_cut(fault, command_done)
    started = elapsed()  # mid-stream, from a process of its own once the engine runs a request (fault_agent.py)
    metrics = (RUN.get("engine_metrics") or {}).get(fault.subject) if fault.mid_stream else None
    _run_command(fault.kind, fault.describe(), fault.subject, metrics)
    command_done.set()
    if fault.restore:  # its seconds count from the command's start: under load it can take many
        PENDING_RESTORES[fault.restore] = fault.subject
        gevent.sleep(max(0.0, started + fault.seconds - elapsed()))
        _run_command(fault.restore, fault.restore, fault.subject)
        PENDING_RESTORES.pop(fault.restore, None)


def _stream_until_cut(fault: Fault, command_done: gevent.event.Event) -> None:
    """Stream long answers from the fault's engine one after another until one is cut or the command has returned,
    and wait (at most MID_STREAM_WAIT_SECONDS) for the first: the fault then has one to cut (fault_agent.py)."""
    models, since = served_by(PLAN, fault.subject), elapsed()
    tenant, entry, _ = profiles.longest_answer(PLAN, models, SCENARIO.output_scale_of) or (None, None, 0)

    def one_after_another() -> None:
        while not command_done.is_set() and current_stage():
            record = _one_stream(tenant, entry, current_stage(), "mid-stream")
            if record.status == 429:  # the tenant at its own limit: as its client would, after Retry-After
                gevent.sleep(record.retry_after or 1.0)
            elif not record.ok:
                return
    if tenant and entry:
        gevent.spawn(one_after_another)
    while not PROBE_STREAMS & STREAMING and elapsed() < since + MID_STREAM_WAIT_SECONDS:
        gevent.sleep(0.05)
    ACTIONS.append({"at": elapsed(), "action": f"{fault.describe()}: waited for the gate's own stream",
                    "result": f"{len(PROBE_STREAMS & STREAMING)} under way after {elapsed() - since:.1f} s"})


def _one_stream(tenant, entry: TrafficPlan, stage: Stage, probe: str) -> Record:
    """One streamed request of the tenant's, recorded like its own and marked as the gate's (`probe`)."""
    body = profiles.longest_stream_body(PLAN, tenant, entry, random.Random(f"{PROMPT_SEED}{probe}"), PROMPT_SEED)
    record = Record(tenant.name, tenant.tier, entry.profile, entry.target, stage.name, elapsed(), True, 0, 0.0,
                    gateway=0, max_tokens=body["max_tokens"], probe=probe)
    PROBE_STREAMS.add(id(record))
    RECORDS.append(send(Connection(), GATEWAYS[0], KEYS[tenant.name], body, record))
    return record


def _run_command(kind: str, action: str, subject: str, metrics: list[str] | None = None) -> None:
    command = RUN.get("fault_commands", {}).get(kind)
    entry = {"at": elapsed(), "action": action, "kind": kind, "result": f"no command given (--fault {kind}=COMMAND)"}
    if command:
        command = agent_command(kind, RUN["fault_commands"], metrics, subject) if metrics else command
        entry["result"] = run_fault_command(command, subject)
        entry["done"] = elapsed()  # a command takes a moment (supervisorctl about 1 s): the fault is done by now
    ACTIONS.append(entry)


class GateShape(LoadTestShape):
    """Every user is spawned at once and stays; the stage decides which of them send.
    The run ends when the scenario's last stage does."""

    def __init__(self) -> None:
        super().__init__()
        self.stage_seen: str | None = None

    def tick(self):
        stage = current_stage()
        if stage is None:
            if IN_FLIGHT["requests"] and elapsed() < SCENARIO.seconds + DRAIN_SECONDS:
                return TOTAL_USERS, TOTAL_USERS  # users idle without a stage; the last requests finish
            if IN_FLIGHT["requests"]:
                ACTIONS.append({"at": elapsed(), "action": "end", "result": f"{IN_FLIGHT['requests']} request(s) "
                                f"still running {DRAIN_SECONDS:.0f} s after the last stage were cut, unrecorded"})
            return None
        if stage.name != self.stage_seen:
            self.stage_seen = stage.name
            ACTIONS.append({"at": elapsed(), "action": f"stage {stage.name}", "result": ""})
            if stage.fault:
                gevent.spawn(run_fault, stage.fault)
        return TOTAL_USERS, TOTAL_USERS


STALL_SECONDS = 1.0
"""A pause of the load generator itself this long is written into the run's actions: while it lasts, no request
is sent and no token is timed, so latencies measured across it are the client's."""


def watch_for_stalls() -> None:
    while True:
        before = time.monotonic()
        gevent.sleep(0.1)
        late = time.monotonic() - before - 0.1
        if late >= STALL_SECONDS:
            ACTIONS.append({"at": elapsed() - late, "action": "load generator stalled", "result": f"{late:.1f} s"})


@events.test_start.add_listener
def _started(environment, **_kwargs) -> None:
    STARTED["at"] = time.monotonic()
    gevent.spawn(watch_for_stalls)
    gevent.spawn(sample_engines, RUN.get("engine_metrics") or {}, elapsed,
                 lambda url: requests.get(url, timeout=2).text, gevent.sleep, ENGINE_SAMPLES)


@events.quitting.add_listener
def _judge(environment, **_kwargs) -> None:
    """Write what was measured and the verdict; the exit code is the verdict."""
    for kind, subject in list(PENDING_RESTORES.items()):  # a fault the run ended before undoing is undone now
        _run_command(kind, f"{kind} (after the run)", subject)
    OUT.mkdir(parents=True, exist_ok=True)
    write_records(OUT, RECORDS)
    write_samples(OUT, ENGINE_SAMPLES)
    done = replace(SCENARIO, fault_times={a["kind"]: (a["at"], a.get("done", a["at"])) for a in reversed(ACTIONS)
                                          if "kind" in a})
    result = verdict(RECORDS, PLAN, done)
    (OUT / VERDICT_JSON).write_text(json.dumps({**result.to_dict(), "actions": ACTIONS, "seconds": SCENARIO.seconds,
                                                "engines": busy_by_stage(ENGINE_SAMPLES, done)}, indent=1),
                                    encoding="utf-8")
    environment.process_exit_code = 0 if result.passed else 1
