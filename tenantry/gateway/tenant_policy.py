"""tenantry's tenant-policy plugin for the LiteLLM proxy.

LiteLLM loads it from its config (`litellm_settings.callbacks:
[tenant_policy.proxy_handler_instance]`); the file sits next to config.yaml
(a ConfigMap on Kubernetes, a rendered file in the local stack) and reads its
settings, rendered from the Plan, from the JSON file TENANTRY_POLICY_FILE
names. It needs only what the LiteLLM image has: litellm, redis, httpx,
prometheus_client.

For every request, from the authenticated key's team (the tenant), never
from what the client sends:

1. Scheduling identity: the tier's vLLM priority and the tenant's cache salt.
   LiteLLM's Router pops a top-level `priority` for its own scheduler, so the
   priority travels in `extra_body` and in the X-Vllm-Priority header (the
   header wins inside vLLM); `cache_salt` at the top level reaches vLLM as is.
   Whatever the client sent for either is replaced, logged and counted.
2. Request caps per tier: a prompt or max_tokens beyond the tier's cap is a
   400; a request without max_tokens gets the cap.
3. Admission by tier (see `decide`): a tenant's concurrency is capped across
   every gateway replica (Redis); guaranteed tenants run in the slots the Plan
   reserved for them; everything else shares the unreserved slots, and is
   shed, spot first, when the engine's live metrics say it is saturated.
   With `spot_pause_after_others_seconds`, spot is also refused on an engine
   for that long after any guaranteed or best-effort request arrived for it
   (a Redis key with that expiry, shared by the replicas).
   When metrics are stale or failing: spot is refused, best-effort is bounded
   by the slot counters alone, guaranteed is never blocked. Spot is judged on
   the engine's load now (a cached state is scraped again first), best-effort
   on one no older than admission acts on, so an engine nobody asked for a
   while is not mistaken for one whose metrics failed. A 429 for capacity
   names its reason in X-Tenantry-Shed.
4. Its own metrics: admissions and sheds by tenant, tier and reason,
   overrides by field, and its own latency.
"""

# No `from __future__ import annotations`: LiteLLM loads this file without
# registering it in sys.modules, and dataclasses cannot resolve string
# annotations of a module that is not there.
import asyncio
import json
import logging
import math
import os
import re
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import httpx
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import ProxyException
from prometheus_client import REGISTRY, Counter, Histogram
from redis.exceptions import RedisError

VLLM_PRIORITY_HEADER = "X-Vllm-Priority"
REQUEST_ID = "tenantry_request_id"
HELD_SLOTS = "tenantry_slots"
CLAIM_ATTEMPTS = 3
CONCURRENCY_POLL_SECONDS = 0.02
SLOT_TTL_SECONDS = 900
"""An admitted request holds its slot until it ends, or this long at most (a
crashed replica must not hold slots for ever)."""
RETRY_AFTER = {"concurrency": 1, "shared-slots": 2, "best-effort": 2, "spot": 10, "metrics": 10}
SHED_HEADER = "X-Tenantry-Shed"
"""On a 429 for capacity (an engine busy, paused for spot, or its load unknown), the
reason; absent when the tenant's own limits refused it. Clients (the smoke check)
tell a shed from a fault by it."""
OWN_LIMIT_REASONS = {"concurrency"}

log = logging.getLogger("tenantry.tenant_policy")



def _metric(kind: Any, name: str, documentation: str, labels: tuple[str, ...] = (), **options: Any) -> Any:
    """The collector, registered once even when LiteLLM loads this file again."""
    existing = REGISTRY._names_to_collectors.get(name)  # noqa: SLF001 - prometheus_client has no public lookup
    return existing if existing is not None else kind(name, documentation, labels, **options)


ADMISSIONS = _metric(Counter, "tenantry_gateway_admissions_total",
                     "Requests admitted or shed by tenantry's admission control.",
                     ("tenant", "tier", "engine", "decision", "reason"))
OVERRIDES = _metric(Counter, "tenantry_gateway_overrides_total", "Client-sent scheduling fields tenantry replaced.",
                    ("tenant", "field"))
REFUSED = _metric(Counter, "tenantry_gateway_refused_total", "Requests refused for exceeding their tier's caps.",
                  ("tenant", "tier", "reason"))
HOOK_SECONDS = _metric(Histogram, "tenantry_gateway_policy_seconds", "Time tenantry's pre-call hook adds to a request.",
                       buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))


# --- settings and live engine state ----------------------------------------------------------


def load_settings(path: str | None = None) -> dict[str, Any]:
    with open(path or os.environ["TENANTRY_POLICY_FILE"], encoding="utf-8") as f:
        return json.load(f)


@dataclass(frozen=True)
class EngineState:
    running: float
    waiting: float
    kv_usage: float
    fetched_at: float

    def fresh(self, max_age: float, now: float) -> bool:
        return now - self.fetched_at <= max_age


_SAMPLE = re.compile(r'^(vllm:num_requests_running|vllm:num_requests_waiting|vllm:kv_cache_usage_perc)\{([^}]*)\}\s+(\S+)')


def parse_vllm_metrics(text: str, model_name: str) -> tuple[float, float, float]:
    """(running, waiting, KV usage) for one served model from vLLM's /metrics."""
    values = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.0}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and f'model_name="{model_name}"' in match.group(2):
            values[match.group(1)] = values[match.group(1)] + float(match.group(3))
    return (values["vllm:num_requests_running"], values["vllm:num_requests_waiting"], values["vllm:kv_cache_usage_perc"])


class EngineMetrics:
    """Engine state from each replica's /metrics (local stack) or from
    Prometheus (Kubernetes, where one Service hides the replicas), cached for
    a moment so a burst of requests costs one scrape.

    A request does not wait for a scrape while the known state is young enough
    to act on: an expired one is refreshed in the background and the last
    known state answers meanwhile. A busy engine's /metrics can take seconds
    to answer; waiting on it held every tenant's requests, guaranteed ones
    included, for as long (found by the gate's noisy-neighbour scenario).
    Only a state older than the caller accepts is waited for (see
    `TenantPolicy._acceptable_age`), and never by a guaranteed request."""

    def __init__(self, settings: dict[str, Any], client: httpx.AsyncClient | None = None):
        self.settings = settings
        self.source = settings.get("metrics", {})
        self.cache_seconds = float(self.source.get("cache_seconds", 1.0))
        self.client = client or httpx.AsyncClient(timeout=float(self.source.get("timeout_seconds", 1.0)))
        self._states: dict[str, EngineState] = {}
        self._refreshes: dict[str, asyncio.Future] = {}

    async def state(self, engine: str, wait_if_older_than: float | None = None) -> EngineState | None:
        """The engine's last known state; a request waits for a scrape (bounded by
        the client's timeout) only when nothing is known yet, or when the state is
        older than `wait_if_older_than`. If that scrape fails, such a caller gets
        None (unknown), never the older state it did not accept."""
        cached = self._states.get(engine)
        age = time.time() - cached.fetched_at if cached else math.inf
        if age < self.cache_seconds:
            return cached
        refresh = self._refreshes.get(engine)
        if refresh is None or refresh.done():
            refresh = self._refreshes[engine] = asyncio.ensure_future(self._refresh(engine))
        if cached is None or (wait_if_older_than is not None and age > wait_if_older_than):
            state = await asyncio.shield(refresh)
            young_enough = state is not None and (
                wait_if_older_than is None or time.time() - state.fetched_at <= wait_if_older_than)
            return state if young_enough else None
        return cached

    async def _refresh(self, engine: str) -> EngineState | None:
        try:
            running, waiting, kv = await self._fetch(engine)
        except (httpx.HTTPError, OSError, ValueError, KeyError) as error:
            log.warning("tenantry: metrics for engine %s unavailable: %s", engine, error)
            return self._states.get(engine)  # the last known state; `decide` treats it as stale once too old
        state = self._states[engine] = EngineState(running, waiting, kv, time.time())
        return state

    async def _fetch(self, engine: str) -> tuple[float, float, float]:
        if "prometheus_url" in self.source:
            values = []
            for metric in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
                aggregate = "max" if metric.endswith("perc") else "sum"
                query = f'{aggregate}({metric}{{model_name="{engine}"}})'
                answer = await self.client.get(f"{self.source['prometheus_url']}/api/v1/query", params={"query": query})
                answer.raise_for_status()
                result = answer.json()["data"]["result"]
                values.append(float(result[0]["value"][1]) if result else 0.0)
            return values[0], values[1], values[2]
        running = waiting = kv = 0.0
        urls = self.settings["engines"][engine]["metrics_urls"]
        for url in urls:
            answer = await self.client.get(url)
            answer.raise_for_status()
            r, w, k = parse_vllm_metrics(answer.text, engine)
            running, waiting, kv = running + r, waiting + w, max(kv, k)
        return running, waiting, kv


# --- in-flight requests, shared by every gateway replica -----------------------------------


class Ledger:
    """In-flight requests as Redis sorted sets of request ids scored by expiry:
    counts survive across replicas, and a crashed replica's entries expire."""

    def __init__(self, redis: Any):
        self.redis = redis
        self._claim = redis.register_script(self.CLAIM)  # EVALSHA: the script is sent once

    async def counts(self, *sets: str, others_mark: tuple[str, float] | None = None,
                     others_key: str | None = None) -> tuple[list[int], bool]:
        """In-flight counts of the sets, in the same round trip: `others_mark`
        (key, seconds) marks an engine as wanted by the tiers above spot for that
        long; `others_key` asks whether such a mark is live (second value)."""
        now = time.time()
        pipe = self.redis.pipeline()
        for name in sets:
            pipe.zremrangebyscore(name, "-inf", now)
            pipe.zcard(name)
        if others_mark:
            pipe.set(others_mark[0], 1, px=max(1, int(others_mark[1] * 1000)))
        if others_key:
            pipe.exists(others_key)
        replies = await pipe.execute()
        return [int(n) for n in replies[1:2 * len(sets):2]], bool(others_key and replies[-1])

    # Check and take in one step, inside Redis: two replicas admitting the same
    # tenant's requests at the same moment cannot both take its last slot.
    CLAIM = """
    for i, key in ipairs(KEYS) do
        redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[1])
        if redis.call('ZCARD', key) >= tonumber(ARGV[4 + i]) then return 0 end
    end
    for _, key in ipairs(KEYS) do
        redis.call('ZADD', key, ARGV[2], ARGV[4])
        redis.call('EXPIRE', key, ARGV[3])
    end
    return 1
    """

    async def claim(self, request_id: str, limits: dict[str, int]) -> bool:
        """Add the request to every set, only if each holds fewer than its limit."""
        now = time.time()
        sets = list(limits)
        return bool(await self._claim(keys=sets, args=[now, now + SLOT_TTL_SECONDS, SLOT_TTL_SECONDS, request_id,
                                                       *(limits[name] for name in sets)]))

    async def remove(self, request_id: str, *sets: str) -> None:
        pipe = self.redis.pipeline()
        for name in sets:
            pipe.zrem(name, request_id)
        await pipe.execute()


# One hash tag for every set: a claim touches several, and Redis Cluster runs a
# script only on keys of one slot.
def tenant_set(tenant: str) -> str:
    return f"{{tenantry}}:inflight:tenant:{tenant}"


def reserved_set(engine: str, tenant: str) -> str:
    return f"{{tenantry}}:inflight:engine:{engine}:reserved:{tenant}"


def others_recent_key(engine: str) -> str:
    """Present while a guaranteed or best-effort request arrived for the engine recently."""
    return f"{{tenantry}}:engine:{engine}:others-recent"


def shared_set(engine: str) -> str:
    return f"{{tenantry}}:inflight:engine:{engine}:shared"


# --- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    admit: bool
    reason: str
    slot: str | None = None
    """'reserved' or 'shared': which slots an admitted request occupies."""
    message: str = ""
    retry_after: int = 0


def decide(
    *,
    tenant: str,
    tier: str,
    engine: str,
    max_concurrency: int,
    tenant_in_flight: int,
    reserved_slots: int,
    reserved_in_flight: int,
    shared_slots: int,
    shared_in_flight: int,
    state: EngineState | None,
    admission: dict[str, Any],
    replicas: int,
    now: float,
    others_recent: bool = False,
) -> Decision:
    """Admit or shed one request. Pure: every path has a unit test."""
    if tenant_in_flight >= max_concurrency:
        return Decision(False, "concurrency", message=f"tenant {tenant} has {tenant_in_flight} requests in flight, "
                        f"its limit is {max_concurrency}", retry_after=RETRY_AFTER["concurrency"])
    if tier == "guaranteed" and reserved_in_flight < reserved_slots:
        return Decision(True, "reserved", slot="reserved")  # the Plan's reserved slots: never blocked
    if shared_in_flight >= shared_slots:
        return Decision(False, "shared-slots", message=f"engine {engine}: all {shared_slots} unreserved slots are busy; "
                        f"{tier} traffic waits", retry_after=RETRY_AFTER["shared-slots"])
    fresh = state is not None and state.fresh(float(admission["metrics_max_age_seconds"]), now)
    if tier == "spot":
        if others_recent:
            pause = float(admission["spot_pause_after_others_seconds"])
            return Decision(False, "others-active", message=f"engine {engine} serving guaranteed or best-effort "
                            f"traffic (within the last {pause:g} s): spot traffic paused",
                            retry_after=max(1, math.ceil(pause)))
        if not fresh:
            return Decision(False, "metrics", message=f"engine {engine}: load unknown (metrics unavailable); "
                            "spot traffic paused until they return", retry_after=RETRY_AFTER["metrics"])
        assert state is not None
        if (state.waiting >= admission["shed_spot_at_waiting"] * replicas
                or state.kv_usage >= admission["shed_spot_at_kv_usage"]):
            return Decision(False, "saturated", message=f"engine {engine} saturated ({state.waiting:.0f} waiting, "
                            f"KV cache {state.kv_usage:.0%}): spot traffic paused", retry_after=RETRY_AFTER["spot"])
        return Decision(True, "idle", slot="shared")
    # best-effort, or a guaranteed tenant beyond its reservation
    if fresh:
        assert state is not None
        if (state.waiting >= admission["shed_best_effort_at_waiting"] * replicas
                or state.kv_usage >= admission["shed_best_effort_at_kv_usage"]):
            return Decision(False, "saturated", message=f"engine {engine} saturated ({state.waiting:.0f} waiting, "
                            f"KV cache {state.kv_usage:.0%}): {tier} traffic above reservations paused",
                            retry_after=RETRY_AFTER["best-effort"])
    return Decision(True, "shared" if fresh else "shared-unknown-load", slot="shared")


# --- the plugin ------------------------------------------------------------------------------


def _refuse(code: int, message: str, kind: str, retry_after: int | None = None,
            shed: str | None = None) -> ProxyException:
    headers = {"Retry-After": str(retry_after)} if retry_after else {}
    if shed:
        headers[SHED_HEADER] = shed
    return ProxyException(message=message, type=kind, param=None, code=code, headers=headers or None)


def _prompt_tokens(data: dict[str, Any]) -> int:
    import litellm

    try:
        if "messages" in data:
            return int(litellm.token_counter(model=data.get("model", ""), messages=data["messages"]))
        prompt = data.get("prompt", "")
        text = prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt)
        return int(litellm.token_counter(model=data.get("model", ""), text=text))
    except Exception:  # noqa: BLE001 - an estimate; never fail a request over counting
        return len(json.dumps(data.get("messages") or data.get("prompt") or "")) // 4


class TenantPolicy(CustomLogger):
    def __init__(self, settings: dict[str, Any] | None = None, redis: Any = None,
                 metrics: EngineMetrics | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else load_settings()
        self.model_engine = {m: name for name, e in self.settings["engines"].items() for m in e["models"]}
        self._ledger = Ledger(redis) if redis is not None else None
        self.metrics = metrics or EngineMetrics(self.settings)
        # The claim each client request (its asyncio task) holds. When LiteLLM's
        # own rate limiter refuses a request after this hook admitted it, LiteLLM
        # retries the hooks on a fresh copy of the request for each fallback model
        # and drops the copies: their metadata, and the claims it names, with them.
        self._task_claims: weakref.WeakKeyDictionary[asyncio.Task, tuple[str, list[str]]] = \
            weakref.WeakKeyDictionary()
        self._waiting_at_limit: dict[str, int] = {}
        """Requests of each tenant waiting here for one of its slots to free."""

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:  # on first use: the event loop it belongs to is running by then
            import redis.asyncio as aioredis

            self._ledger = Ledger(aioredis.Redis(
                host=os.environ.get("REDIS_HOST", "127.0.0.1"), port=int(os.environ.get("REDIS_PORT", "6379")),
                password=os.environ.get("REDIS_PASSWORD") or None, socket_timeout=1.0,
            ))
        return self._ledger

    def tenant_of(self, user_api_key_dict: Any) -> tuple[str, dict[str, Any]] | None:
        alias = getattr(user_api_key_dict, "team_alias", None)
        tenant = self.settings["tenants"].get(alias) if alias else None
        return (alias, tenant) if tenant else None

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str) -> dict:
        started = time.perf_counter()
        try:
            found = self.tenant_of(user_api_key_dict)
            if found is None:
                return data  # the master key or a key outside tenantry: no tenant policy applies
            name, tenant = found
            self._identity(name, tenant, data)
            self._caps(name, tenant, data)
            await self._admit(name, tenant, data)
            return data
        finally:
            HOOK_SECONDS.observe(time.perf_counter() - started)

    def _identity(self, name: str, tenant: dict[str, Any], data: dict) -> None:
        priority = int(tenant["priority"])
        extra_body = dict(data.get("extra_body") or {})
        for field, sent in (("priority", data.pop("priority", None)), ("extra_body.priority", extra_body.get("priority"))):
            if sent is not None and sent != priority:
                self._overridden(name, field, sent, priority)
        headers = dict(data.get("extra_headers") or {})
        for header in [h for h in headers if h.lower() == VLLM_PRIORITY_HEADER.lower()]:
            if str(headers[header]) != str(priority):
                self._overridden(name, "X-Vllm-Priority", headers[header], priority)
            del headers[header]
        proxy_headers = (data.get("proxy_server_request") or {}).get("headers") or {}
        if any(h.lower() == VLLM_PRIORITY_HEADER.lower() for h in proxy_headers):
            self._overridden(name, "X-Vllm-Priority", "client header", priority)
        extra_body["priority"] = priority
        headers[VLLM_PRIORITY_HEADER] = str(priority)
        salt = tenant["cache_salt"]
        for field, sent in (("cache_salt", data.get("cache_salt")), ("extra_body.cache_salt", extra_body.pop("cache_salt", None))):
            if sent is not None and sent != salt:
                self._overridden(name, field, sent, salt)
        if salt:
            data["cache_salt"] = salt
        else:
            data.pop("cache_salt", None)
        data["extra_body"] = extra_body
        data["extra_headers"] = headers

    @staticmethod
    def _overridden(tenant: str, field: str, sent: Any, kept: Any) -> None:
        OVERRIDES.labels(tenant=tenant, field=field.split(".")[-1]).inc()
        log.info("tenantry: tenant %s sent %s=%r; replaced by %r", tenant, field, sent, kept)

    def _caps(self, name: str, tenant: dict[str, Any], data: dict) -> None:
        cap_out = tenant.get("max_output_tokens")
        if cap_out:
            asked = data.get("max_completion_tokens") or data.get("max_tokens")
            if asked is not None and int(asked) > cap_out:
                REFUSED.labels(tenant=name, tier=tenant["tier"], reason="max_tokens").inc()
                raise _refuse(400, f"max_tokens {asked} exceeds the {cap_out} tokens the {tenant['tier']} tier allows "
                              f"(tenant {name})", "invalid_request_error")
            if asked is None:
                data["max_tokens"] = cap_out
        cap_in = tenant.get("max_prompt_tokens")
        if cap_in:
            tokens = _prompt_tokens(data)
            if tokens > cap_in:
                REFUSED.labels(tenant=name, tier=tenant["tier"], reason="prompt").inc()
                raise _refuse(400, f"the prompt has about {tokens} tokens; the {tenant['tier']} tier allows "
                              f"{cap_in} (tenant {name})", "invalid_request_error")

    async def _admit(self, name: str, tenant: dict[str, Any], data: dict) -> None:
        await self._release_abandoned()  # an earlier attempt of this same request, dropped for a fallback
        engine = self.model_engine.get(str(data.get("model")))
        if engine is None:
            return  # not a tenantry engine; LiteLLM's own access checks apply
        spec = self.settings["engines"][engine]
        admission = self.settings["admission"]
        request_id = uuid.uuid4().hex
        reserved = int(spec["reserved"].get(name, 0))
        shared_slots = int(spec["shared_slots"])
        sets = (tenant_set(name), reserved_set(engine, name), shared_set(engine))
        max_concurrency = int(tenant["max_concurrency"])
        # At its limit, a tenant waits a moment for one of its requests to end:
        # a stream is released by the event LiteLLM fires just after its last
        # byte, which a client's next request can overtake.
        wait_until = time.monotonic() + float(admission.get("wait_at_concurrency_limit_seconds", 0))
        lost_claims = 0
        waiting = False
        # Spot's pause follows the others' demand, refused or not: a guaranteed
        # request turned away is still a sign the engine is not idle.
        pause = float(admission["spot_pause_after_others_seconds"])
        others_mark = (others_recent_key(engine), pause) if pause and tenant["tier"] != "spot" else None
        others_key = others_recent_key(engine) if pause and tenant["tier"] == "spot" else None
        try:
            while True:
                (tenant_n, reserved_n, shared_n), others_recent = await self.ledger.counts(
                    *sets, others_mark=others_mark, others_key=others_key)
                others_mark = None  # once per request, not once per poll at the concurrency limit
                state = None if tenant["tier"] == "spot" and others_recent else await self.metrics.state(
                    engine, wait_if_older_than=self._acceptable_age(tenant["tier"]))
                decision = decide(
                    tenant=name, tier=tenant["tier"], engine=engine, max_concurrency=max_concurrency,
                    tenant_in_flight=tenant_n, reserved_slots=reserved, reserved_in_flight=reserved_n,
                    shared_slots=shared_slots, shared_in_flight=shared_n, state=state, admission=admission,
                    replicas=int(spec["replicas"]), now=time.time(), others_recent=others_recent,
                )
                if not decision.admit:
                    # At most one waiter per slot of the tenant's limit: a client holding
                    # exactly its limit is covered, a flood beyond it is refused at once
                    # instead of polling Redis 50 times a second per request.
                    if (decision.reason == "concurrency" and time.monotonic() < wait_until
                            and (waiting or self._waiting_at_limit.get(name, 0) < max_concurrency)):
                        if not waiting:
                            waiting = True
                            self._waiting_at_limit[name] = self._waiting_at_limit.get(name, 0) + 1
                        await asyncio.sleep(CONCURRENCY_POLL_SECONDS)
                        continue
                    break
                slot = (sets[1], reserved) if decision.slot == "reserved" else (sets[2], shared_slots)
                held = {sets[0]: max_concurrency, slot[0]: slot[1]}
                if await self.ledger.claim(request_id, held):
                    break
                lost_claims += 1  # another replica took the slot between counting and claiming
                if lost_claims == CLAIM_ATTEMPTS:
                    decision = Decision(False, "contention", message=f"engine {engine}: its slots were taken while "
                                        f"admitting {name}'s request; retry", retry_after=RETRY_AFTER["concurrency"])
                    break
        except (RedisError, OSError) as error:
            log.warning("tenantry: Redis unavailable (%s); admitting by tier without counters", error)
            if tenant["tier"] == "guaranteed":
                return
            raise _refuse(429, f"admission state unavailable: {tenant['tier']} traffic paused", "rate_limit_error",
                          RETRY_AFTER["metrics"], shed="redis") from None
        finally:
            if waiting:
                self._waiting_at_limit[name] -= 1
        ADMISSIONS.labels(tenant=name, tier=tenant["tier"], engine=engine,
                          decision="admitted" if decision.admit else "shed", reason=decision.reason).inc()
        if not decision.admit:
            raise _refuse(429, decision.message, "rate_limit_error", decision.retry_after,
                          shed=None if decision.reason in OWN_LIMIT_REASONS else decision.reason)
        metadata = data.setdefault("metadata", {})
        metadata[REQUEST_ID] = request_id
        metadata[HELD_SLOTS] = list(held)
        task = asyncio.current_task()
        if task is not None:
            self._task_claims[task] = (request_id, list(held))

    def _acceptable_age(self, tier: str) -> float | None:
        """How old an engine state a request of the tier is judged on without
        waiting for a scrape: guaranteed, any (it never waits); best-effort, as
        old as admission acts on; spot, no older than the metrics cache, since it
        may run only on capacity idle now, not idle a few seconds ago."""
        if tier == "guaranteed":
            return None
        if tier == "spot":
            return self.metrics.cache_seconds
        return float(self.settings["admission"]["metrics_max_age_seconds"])

    async def _release_abandoned(self) -> None:
        task = asyncio.current_task()
        claim = self._task_claims.pop(task, None) if task is not None else None
        if claim:
            await self._release({"metadata": {REQUEST_ID: claim[0], HELD_SLOTS: claim[1]}})

    async def _release(self, kwargs: dict[str, Any]) -> None:
        metadata = ((kwargs.get("litellm_params") or {}).get("metadata")) or kwargs.get("metadata") or {}
        # Popped: the first release of a request does the work, the later
        # ones (logging events, when they see the same metadata) cost nothing.
        request_id, held = metadata.pop(REQUEST_ID, None), metadata.pop(HELD_SLOTS, None)
        if request_id and held:
            try:
                await self.ledger.remove(request_id, *held)
            except (RedisError, OSError) as error:  # the entry expires on its own
                log.warning("tenantry: could not release %s: %s", request_id, error)

    # A response's slots are released before it leaves the gateway: a client
    # that keeps exactly its max_concurrency requests going sends the next one
    # the moment a response ends, and must not find the old one still counted.
    # A stream's are released by the success or failure event LiteLLM fires as
    # the stream ends (overriding its stream-iterator hook would take every
    # stream off LiteLLM's fast path: +20 % gateway CPU per stream, measured by
    # benchmarks/gateway_policy.py). The ledger's expiry covers the rest.

    async def async_post_call_success_hook(self, data, user_api_key_dict, response):  # noqa: ANN001
        task = asyncio.current_task()
        if task is not None:
            self._task_claims.pop(task, None)
        await self._release({"metadata": (data or {}).get("metadata") or {}})

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):  # noqa: ANN001
        await self._release(kwargs)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):  # noqa: ANN001
        await self._release(kwargs)

    async def async_post_call_failure_hook(self, request_data, original_exception, user_api_key_dict,  # noqa: ANN001
                                           traceback_str=None):  # noqa: ANN001
        await self._release({"metadata": (request_data or {}).get("metadata") or {}})
        await self._release_abandoned()


_instance: TenantPolicy | None = None


def __getattr__(name: str) -> Any:
    """LiteLLM loads `proxy_handler_instance` from its config; it is made on
    first use, so importing this file (tests, tools) needs no settings, while
    a gateway without TENANTRY_POLICY_FILE fails at start, loudly."""
    global _instance
    if name == "proxy_handler_instance":
        if _instance is None:
            _instance = TenantPolicy()
        return _instance
    raise AttributeError(name)
