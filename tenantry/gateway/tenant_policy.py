"""tenantry's tenant-policy plugin for the LiteLLM proxy: the module LiteLLM loads.

LiteLLM loads it from its config (`litellm_settings.callbacks: [tenant_policy.proxy_handler_instance]`);
it sits next to config.yaml (a ConfigMap on Kubernetes, a rendered file in the local stack) beside its
neighbours, the other tenant_policy_*.py files, and reads its settings, rendered from the Plan, from the
JSON file TENANTRY_POLICY_FILE names. It needs only what the LiteLLM image has: litellm, redis, httpx,
prometheus_client.

For every request, from the authenticated key's team (the tenant), never from what the client sends:

0. The one rule: the model LiteLLM will route the request to, as LiteLLM resolved it from everything it
   routes on (body, query string, path), is one of the tenant's models; anything else is a 403 before
   admission. The front door (tenant_policy_front_door) has already held the request to the routes, fields
   and headers a tenant may send; keys of the plugin's own in the request's metadata are dropped, so only
   the plugin sets them.
1. Scheduling identity: the tier's vLLM priority and the tenant's cache salt. LiteLLM's Router pops a
   top-level `priority` for its own scheduler, so the priority travels in `extra_body` and in the
   X-Vllm-Priority header (the header wins inside vLLM); `cache_salt` at the top level reaches vLLM as
   is. Whatever the client sent for either is replaced, logged and counted.
2. Request caps per tier: a prompt (its messages and tool definitions, or its prompt) or an output length
   (max_tokens, max_completion_tokens) beyond the tier's cap is a 400; a request without one gets the cap.
3. Admission by tier (tenant_policy_decision.decide), counted in Redis across every gateway replica
   (tenant_policy_ledger), judged on the engines' live load (tenant_policy_engine_metrics). With
   `spot_pause_after_others_seconds`, spot is also refused on an engine for that long after any
   guaranteed or best-effort request arrived for it (a Redis key with that expiry, shared by the
   replicas). Spot is judged on the engine's load now (a cached state is scraped again first),
   best-effort on one no older than admission acts on, so an engine nobody asked for a while is not
   mistaken for one whose metrics failed. A tier's cap on an engine (`tier_slots`) is a set of its own.
   A 429 for capacity names its reason in X-Tenantry-Shed; before it, a tenant with an overload
   fallback is tried on those engines in order, and one that admits it serves the request (its model
   rewritten; the answer says so in X-Tenantry-Rerouted). Without Redis, guaranteed is counted on each
   replica alone and the other tiers are refused.
4. Its own metrics: admissions and sheds by tenant, tier and reason, decisions taken in fail-safe (an
   engine's load unknown, Redis lost), overrides by field, and its own latency; and what each tenant
   got against its objectives (tenant_policy_outcomes), for the alerts that burn its error budget.
"""

# No `from __future__ import annotations`, and no dataclass here: LiteLLM loads
# this file without registering it in sys.modules, and dataclasses cannot
# resolve string annotations of a module that is not there.
import asyncio
import logging
import os
import sys
import time
import uuid
import weakref
from typing import Any

# LiteLLM executes this file by its path and puts neither it in sys.modules nor
# its folder on sys.path, so the neighbours are found by appending the folder here: appended,
# they cannot shadow an installed module, and their prefixed names are in no package
# (docs/decisions.md: The plugin's modules load as neighbours).
_FOLDER = os.path.dirname(os.path.abspath(__file__))
if _FOLDER not in sys.path:
    sys.path.append(_FOLDER)

from litellm.integrations.custom_logger import CustomLogger  # noqa: E402
from redis.exceptions import RedisError  # noqa: E402

import tenant_policy_contract  # noqa: E402
import tenant_policy_decision  # noqa: E402
import tenant_policy_engine_metrics  # noqa: E402
import tenant_policy_errors  # noqa: E402
import tenant_policy_front_door  # noqa: E402
import tenant_policy_gc  # noqa: E402
import tenant_policy_ledger  # noqa: E402
import tenant_policy_metrics  # noqa: E402
import tenant_policy_outcomes  # noqa: E402
import tenant_policy_request  # noqa: E402
import tenant_policy_settings  # noqa: E402
from tenant_policy_contract import (  # noqa: E402
    SHED_HEADER, caps, drop_own_metadata, identity, refuse, served_model)
from tenant_policy_decision import CAPACITY_REASONS, RETRY_AFTER, Decision, decide  # noqa: E402
from tenant_policy_engine_metrics import EngineMetrics  # noqa: E402
from tenant_policy_ledger import (  # noqa: E402
    Ledger, ReplicaCounts, redis_from_environment, reserved_set, shared_set, spot_pause_keys, tenant_set, tier_set)
from tenant_policy_metrics import ADMISSIONS, FAILSAFE, HOOK_SECONDS, REROUTED, SHED  # noqa: E402
from tenant_policy_outcomes import Outcomes  # noqa: E402
from tenant_policy_settings import EngineSettings, PolicySettings, TenantSettings, load_settings  # noqa: E402

for _neighbour in (tenant_policy_contract, tenant_policy_decision, tenant_policy_engine_metrics, tenant_policy_errors,
                   tenant_policy_front_door, tenant_policy_ledger, tenant_policy_metrics, tenant_policy_outcomes,
                   tenant_policy_request, tenant_policy_settings):
    if os.path.dirname(os.path.abspath(_neighbour.__file__)) != _FOLDER:  # an older copy found first: refuse to mix
        raise ImportError(f"{_neighbour.__name__} was imported from {_neighbour.__file__}, not from {_FOLDER}")

REQUEST_ID = "tenantry_request_id"
HELD_SLOTS = "tenantry_slots"
CLAIM_ATTEMPTS = 3
CONCURRENCY_POLL_SECONDS = 0.02
OWN_LIMIT_REASONS = {"concurrency"}
REROUTE_HEADER = "X-Tenantry-Rerouted"
"""On an answer the tenant's overload fallback served: `<model asked> -> <model served> (<reason>)`."""
REROUTED_FROM = "tenantry_rerouted"

log = logging.getLogger("tenantry.tenant_policy")


class TenantPolicy(CustomLogger):
    def __init__(self, settings: PolicySettings | None = None, redis: Any = None,
                 metrics: EngineMetrics | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else load_settings()
        self.model_engine = {m: name for name, e in self.settings.engines.items() for m in e.models}
        self._ledger = Ledger(redis) if redis is not None else None
        self._replica_counts = ReplicaCounts()
        self.metrics = metrics or EngineMetrics(self.settings)
        self.outcomes = Outcomes(self.settings)
        # The claim each client request (its asyncio task) holds. When LiteLLM's
        # own rate limiter refuses a request after this hook admitted it, LiteLLM
        # retries the hooks on a fresh copy of the request for each fallback model
        # and drops the copies: their metadata, and the claims it names, with them.
        self._task_claims: weakref.WeakKeyDictionary[asyncio.Task, tuple[str, list[str]]] = weakref.WeakKeyDictionary()
        self._waiting_at_limit: dict[str, int] = {}
        """Requests of each tenant waiting here for one of its slots to free."""

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:  # on first use: the event loop it belongs to is running by then
            self._ledger = Ledger(redis_from_environment())
        return self._ledger

    def tenant_of(self, user_api_key_dict: Any) -> tuple[str, TenantSettings] | None:
        alias = getattr(user_api_key_dict, "team_alias", None)
        tenant = self.settings.tenants.get(alias) if alias else None
        return (alias, tenant) if tenant else None

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str) -> dict:
        started = time.perf_counter()
        try:
            found = self.tenant_of(user_api_key_dict)
            if found is None:
                return data  # the master key or a key outside tenantry: no tenant policy applies
            name, tenant = found
            drop_own_metadata(data)
            served_model(name, tenant, data, call_type)
            identity(name, tenant, data)
            caps(name, tenant, data)
            await self._admit(name, tenant, data)
            return data
        finally:
            HOOK_SECONDS.observe(time.perf_counter() - started)

    async def _admit(self, name: str, tenant: TenantSettings, data: dict) -> None:
        await self._release_abandoned()  # an earlier attempt of this same request, dropped for a fallback
        engine = self.model_engine.get(str(data.get("model")))
        if engine is None:
            return  # a model of the tenant's that no tenantry engine serves: nothing to admit it on
        request_id = uuid.uuid4().hex
        decision, held = await self._admit_on(name, tenant, engine, request_id)
        # Refused for the engine's capacity, never for the tenant's own limits: the tenant's overload fallback, in
        # order, each judged on its own engine as if asked for (docs/decisions.md: Overload fallback reroutes
        # inside admission, before the 429).
        for model in tenant.overload_fallback if not decision.admit and decision.reason in CAPACITY_REASONS else ():
            fallback = self.model_engine.get(model)
            if fallback is None or fallback == engine:
                continue
            rerouted, held = await self._admit_on(name, tenant, fallback, request_id, rerouting=True)
            if rerouted.admit:
                REROUTED.labels(tenant=name, tier=tenant.tier, engine=engine, to=fallback, reason=decision.reason).inc()
                data.setdefault("metadata", {})[REROUTED_FROM] = f"{data.get('model')} -> {model} ({decision.reason})"
                data["model"], decision = model, rerouted
                break
        if not decision.admit:
            shed = None if decision.reason in OWN_LIMIT_REASONS else decision.reason
            if shed:
                SHED.labels(tenant=name, tier=tenant.tier, reason=shed).inc()
            raise refuse(429, decision.message, "rate_limit_error", decision.retry_after, shed=shed)
        served = self.settings.engines[self.model_engine[str(data["model"])]]
        data["extra_headers"] = served.routed_headers(data.get("extra_headers"), name, tenant.tier)
        metadata = data.setdefault("metadata", {})
        metadata[REQUEST_ID] = request_id
        metadata[HELD_SLOTS] = list(held)
        task = asyncio.current_task()
        if task is not None:
            self._task_claims[task] = (request_id, list(held))

    async def _admit_on(self, name: str, tenant: TenantSettings, engine: str, request_id: str,
                        rerouting: bool = False) -> tuple[Decision, dict[str, int]]:
        try:
            decision, held = await self._claim_slots(name, tenant, engine, request_id)
        except (RedisError, OSError) as error:
            decision, held = self._admit_without_redis(name, tenant, engine, request_id, error), {}
        outcome = "admitted" if decision.admit else "shed"
        ADMISSIONS.labels(tenant=name, tier=tenant.tier, engine=engine,
                          decision=("rerouted-" if rerouting else "") + outcome, reason=decision.reason).inc()
        return decision, held

    def _admit_without_redis(self, name: str, tenant: TenantSettings, engine: str, request_id: str,
                             error: Exception) -> Decision:
        """Redis away: guaranteed up to its max_concurrency on this replica, the others refused (docs/platform.md)."""
        log.warning("tenantry: Redis unavailable (%s); admitting by tier, counted on this replica", error)
        FAILSAFE.labels(engine=engine, tier=tenant.tier, cause="redis").inc()
        if tenant.tier != "guaranteed":
            SHED.labels(tenant=name, tier=tenant.tier, reason="redis").inc()
            raise refuse(429, f"admission state unavailable: {tenant.tier} traffic paused", "rate_limit_error",
                          RETRY_AFTER["metrics"], shed="redis") from None
        limit = tenant.max_concurrency
        if self._replica_counts.claim(request_id, name, limit):
            return Decision(True, "redis-unavailable")
        return Decision(False, "concurrency", message=f"tenant {name} has {limit} requests in flight, its limit is "
                        f"{limit} (counted on this gateway replica: Redis is unavailable)",
                        retry_after=RETRY_AFTER["concurrency"])

    async def _claim_slots(self, name: str, tenant: TenantSettings, engine: str,
                           request_id: str) -> tuple[Decision, dict[str, int]]:
        """The decision, and the slots it claimed in the ledger when it admits."""
        spec = self.settings.engines[engine]
        tier_cap = spec.tier_slots.get(tenant.tier)
        capped = (tier_set(engine, tenant.tier),) if tier_cap is not None else ()
        sets = (tenant_set(name), reserved_set(engine, name), shared_set(engine), *capped)
        # At its limit, a tenant waits a moment for one of its requests to end:
        # a stream is released by the event LiteLLM fires just after its last
        # byte, which a client's next request can overtake.
        wait_until = time.monotonic() + self.settings.admission.wait_at_concurrency_limit_seconds
        others_mark, others_key = spot_pause_keys(tenant.tier, engine,
                                                  self.settings.admission.spot_pause_after_others_seconds)
        lost_claims = 0
        waiting = False
        try:
            while True:
                counts, others_recent = await self.ledger.counts(*sets, others_mark=others_mark, others_key=others_key)
                others_mark = None  # once per request, not once per poll at the concurrency limit
                decision, shared_slots = await self._decide(name, tenant, engine, spec, counts, others_recent, tier_cap)
                if not decision.admit:
                    if decision.reason == "concurrency" and self._may_wait(name, tenant, wait_until, waiting):
                        if not waiting:
                            waiting = True
                            self._waiting_at_limit[name] = self._waiting_at_limit.get(name, 0) + 1
                        await asyncio.sleep(CONCURRENCY_POLL_SECONDS)
                        continue
                    return decision, {}
                slot = (sets[1], spec.reserved.get(name, 0)) if decision.slot == "reserved" else (sets[2], shared_slots)
                held = {sets[0]: tenant.max_concurrency, slot[0]: slot[1]}
                if tier_cap is not None and decision.slot == "shared":
                    held[sets[3]] = tier_cap
                full = await self.ledger.claim_or_full(request_id, held)
                if full is None:
                    return decision, held
                # Another replica took a slot between counting and claiming. The tenant's own: its limit, counted
                # again and waited on as at the limit (until the wait is over); an engine's slot: contention.
                lost_claims += full != sets[0] or time.monotonic() >= wait_until
                if lost_claims == CLAIM_ATTEMPTS:
                    return Decision(False, "contention", message=f"engine {engine}: its slots were taken while "
                                    f"admitting {name}'s request; retry", retry_after=RETRY_AFTER["concurrency"]), {}
        finally:
            if waiting:
                self._waiting_at_limit[name] -= 1

    async def _decide(self, name: str, tenant: TenantSettings, engine: str, spec: EngineSettings,
                      counts: list[int], others_recent: bool, tier_cap: int | None) -> tuple[Decision, int]:
        """The decision, and the unreserved slots it counted: on the replicas the engine's fresh load reports
        (an autoscaled engine's added replicas bring theirs), on the Plan's floor when the load is unknown."""
        tenant_n, reserved_n, shared_n, *tier_n = counts
        state = None if tenant.tier == "spot" and others_recent else await self.metrics.state(
            engine, wait_if_older_than=self._acceptable_age(tenant.tier))
        now = time.time()
        fresh = state is not None and state.fresh(self.settings.admission.metrics_max_age_seconds, now)
        if not (tenant.tier == "spot" and others_recent) and not fresh:
            FAILSAFE.labels(engine=engine, tier=tenant.tier, cause="metrics").inc()
        replicas = spec.live_replicas(state.replicas if fresh else None)
        shared_slots = spec.shared_slots_on(replicas)
        return decide(
            tenant=name, tier=tenant.tier, engine=engine, max_concurrency=tenant.max_concurrency,
            tenant_in_flight=tenant_n, reserved_slots=spec.reserved.get(name, 0), reserved_in_flight=reserved_n,
            shared_slots=shared_slots, shared_in_flight=shared_n, state=state,
            admission=self.settings.admission, replicas=replicas, now=now, others_recent=others_recent,
            tier_slots=tier_cap, tier_in_flight=tier_n[0] if tier_n else 0,
        ), shared_slots

    def _may_wait(self, name: str, tenant: TenantSettings, wait_until: float, waiting: bool) -> bool:
        """At most one waiter per slot of the tenant's limit: a client holding
        exactly its limit is covered, a flood beyond it is refused at once
        instead of polling Redis 50 times a second per request."""
        return time.monotonic() < wait_until and (
            waiting or self._waiting_at_limit.get(name, 0) < tenant.max_concurrency)

    def _acceptable_age(self, tier: str) -> float | None:
        """How old an engine state a request of the tier is judged on without
        waiting for a scrape: guaranteed, any (it never waits); best-effort, as
        old as admission acts on; spot, no older than the metrics cache, since it
        may run only on capacity idle now, not idle a few seconds ago."""
        if tier == "guaranteed":
            return None
        if tier == "spot":
            return self.metrics.cache_seconds
        return self.settings.admission.metrics_max_age_seconds

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
        self._replica_counts.remove(request_id)
        if request_id and held:
            try:
                await self.ledger.remove(request_id, *held)
            except (RedisError, OSError) as error:  # the entry expires on its own
                log.warning("tenantry: could not release %s: %s", request_id, error)

    # A response's slots are released before it leaves the gateway: a client
    # that keeps exactly its max_concurrency requests going sends the next one
    # the moment a response ends, and must not find the old one still counted.
    # A stream's are released by the success or failure event LiteLLM fires as
    # the stream ends, not by overriding its stream-iterator hook, which would
    # take every stream off LiteLLM's fast path (docs/decisions.md: Streams are
    # released by LiteLLM's logging events). The ledger's expiry covers the rest.

    async def async_post_call_success_hook(self, data, user_api_key_dict, response):  # noqa: ANN001
        task = asyncio.current_task()
        if task is not None:
            self._task_claims.pop(task, None)
        await self._release({"metadata": (data or {}).get("metadata") or {}})

    async def async_post_call_response_headers_hook(self, data, user_api_key_dict, response,  # noqa: ANN001
                                                    request_headers=None):  # noqa: ANN001
        rerouted = ((data or {}).get("metadata") or {}).get(REROUTED_FROM)
        return {REROUTE_HEADER: rerouted} if rerouted else None

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):  # noqa: ANN001
        await self._release(kwargs)
        self.outcomes.record(kwargs.get("standard_logging_object"), response_obj)

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
    a gateway without TENANTRY_POLICY_FILE or with settings that do not match
    fails at start, loudly."""
    global _instance
    if name == "proxy_handler_instance":
        if _instance is None:
            _instance = TenantPolicy()
            tenant_policy_front_door.install(_instance.settings.front_door)
            tenant_policy_gc.install()
        return _instance
    raise AttributeError(name)
