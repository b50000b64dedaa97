"""Requests in flight, shared by every gateway replica: Redis sorted sets of
request ids scored by the expiry of their lease, so counts survive across
replicas and a dead replica's requests free their slots on their own.

A claim is a lease of LEASE_SECONDS that the replica holding the request
renews every RENEW_EVERY_SECONDS while the request runs (a stream may run for
the whole request timeout); a replica killed mid-request stops renewing, and
its requests' slots are free again at most LEASE_SECONDS later, at the next
count (docs/decisions.md: Slots are leases a live replica renews)."""

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

LEASE_SECONDS = 30.0
RENEW_EVERY_SECONDS = 10.0
"""A third of the lease: two renewals can fail (a slow Redis, a busy event loop) before a live
request's slot lapses."""
HELD_AT_MOST_SECONDS = 900.0
"""No request is renewed past this age (LiteLLM's request timeout is 600 s): a claim this replica
failed to release lapses on its own."""
AWAY_SECONDS = 1.0
"""After Redis failed a count or a claim, how long the ledger says it is away without asking:
a request during an outage is decided at once instead of each waiting on its own connect."""

log = logging.getLogger("tenantry.tenant_policy")


def redis_from_environment() -> Any:
    """The gateway's Redis (REDIS_HOST, REDIS_PORT, REDIS_PASSWORD, as LiteLLM reads them). One quick
    retry for a dropped pooled connection and no backoff: redis-py 8's default (10 retries with
    exponential backoff) kept every request of a Redis outage waiting 3.3 s before the fail-safe."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return aioredis.Redis(host=os.environ.get("REDIS_HOST", "127.0.0.1"), port=int(os.environ.get("REDIS_PORT", "6379")),
                          password=os.environ.get("REDIS_PASSWORD") or None, socket_timeout=1.0,
                          socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 1))


class Ledger:
    # Check and take in one step, inside Redis: two replicas admitting the same
    # tenant's requests at the same moment cannot both take its last slot.
    CLAIM = """
    for i, key in ipairs(KEYS) do
        redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[1])
        if redis.call('ZCARD', key) >= tonumber(ARGV[4 + i]) then return i end
    end
    for _, key in ipairs(KEYS) do
        redis.call('ZADD', key, ARGV[2], ARGV[4])
        redis.call('EXPIRE', key, ARGV[3])
    end
    return 0
    """

    def __init__(self, redis: Any, clock: Callable[[], float] = time.time):
        self.redis = redis
        self.clock = clock
        self._claim = redis.register_script(self.CLAIM)  # EVALSHA: the script is sent once
        self.held: dict[str, tuple[tuple[str, ...], float]] = {}
        """This replica's requests in flight, their sets and when each was claimed: the leases it renews."""
        self._renewing: asyncio.Task | None = None
        self.away_until = 0.0

    async def _execute(self, work: Callable[[], Any]) -> Any:
        """Run a pipeline or script call, unless Redis failed within AWAY_SECONDS (ConnectionError,
        an OSError, as the plugin's fail-safe expects)."""
        if self.clock() < self.away_until:
            raise ConnectionError("Redis failed a moment ago; not asked again yet")
        try:
            return await work()
        except (RedisError, OSError):
            self.away_until = self.clock() + AWAY_SECONDS
            raise

    async def counts(self, *sets: str, others_mark: tuple[str, float] | None = None,
                     others_key: str | None = None) -> tuple[list[int], bool]:
        """In-flight counts of the sets, in the same round trip: `others_mark`
        (key, seconds) marks an engine as wanted by the tiers above spot for that
        long; `others_key` asks whether such a mark is live (second value)."""
        now = self.clock()
        pipe = self.redis.pipeline()
        for name in sets:
            pipe.zremrangebyscore(name, "-inf", now)
            pipe.zcard(name)
        if others_mark:
            pipe.set(others_mark[0], 1, px=max(1, int(others_mark[1] * 1000)))
        if others_key:
            pipe.exists(others_key)
        replies = await self._execute(pipe.execute)
        return [int(n) for n in replies[1:2 * len(sets):2]], bool(others_key and replies[-1])

    async def claim(self, request_id: str, limits: dict[str, int]) -> bool:
        return await self.claim_or_full(request_id, limits) is None

    async def claim_or_full(self, request_id: str, limits: dict[str, int]) -> str | None:
        """Add the request to every set, only if each holds fewer than its limit: None when it did
        (a claim taken is renewed from then on until it is removed), else the first set that was full."""
        now = self.clock()
        sets = list(limits)
        full = int(await self._execute(lambda: self._claim(
            keys=sets, args=[now, now + LEASE_SECONDS, int(LEASE_SECONDS) + 1, request_id,
                             *(limits[name] for name in sets)])))
        if full:
            return sets[full - 1]
        self.held[request_id] = (tuple(sets), now)
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self._renew_forever())
        return None

    async def remove(self, request_id: str, *sets: str) -> None:
        self.held.pop(request_id, None)
        pipe = self.redis.pipeline()
        for name in sets:
            pipe.zrem(name, request_id)
        await pipe.execute()

    async def renew(self) -> int:
        """Extend the lease of every request this replica holds (only where it is still
        there: XX never brings back a removed one); how many were renewed."""
        now = self.clock()
        for request_id, (_, claimed) in list(self.held.items()):
            if now - claimed > HELD_AT_MOST_SECONDS:
                del self.held[request_id]
        if not self.held:
            return 0
        pipe = self.redis.pipeline()
        for request_id, (sets, _) in self.held.items():
            for name in sets:
                pipe.zadd(name, {request_id: now + LEASE_SECONDS}, xx=True)
                pipe.expire(name, int(LEASE_SECONDS) + 1)
        await pipe.execute()
        return len(self.held)

    async def _renew_forever(self) -> None:
        while self.held:
            await asyncio.sleep(RENEW_EVERY_SECONDS)
            try:
                await self.renew()
            except Exception as error:  # noqa: BLE001 - Redis away: the claims lapse, admission's fail-safe decides
                log.warning("tenantry: could not renew %d slot leases in Redis: %s", len(self.held), error)


class ReplicaCounts:
    """Requests in flight per tenant on this replica alone: admission's fail-safe while Redis is
    away, so a guaranteed tenant admitted without the shared ledger is still held to its
    max_concurrency on each replica (at most replicas x max_concurrency in all)."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}
        """Request id -> tenant."""

    def count(self, tenant: str) -> int:
        return sum(1 for holder in self.held.values() if holder == tenant)

    def claim(self, request_id: str, tenant: str, limit: int) -> bool:
        if self.count(tenant) >= limit:
            return False
        self.held[request_id] = tenant
        return True

    def remove(self, request_id: str) -> None:
        self.held.pop(request_id, None)


# One hash tag for every set: a claim touches several, and Redis Cluster runs a
# script only on keys of one slot.
def tenant_set(tenant: str) -> str:
    return f"{{tenantry}}:inflight:tenant:{tenant}"


def reserved_set(engine: str, tenant: str) -> str:
    return f"{{tenantry}}:inflight:engine:{engine}:reserved:{tenant}"


def shared_set(engine: str) -> str:
    return f"{{tenantry}}:inflight:engine:{engine}:shared"


def tier_set(engine: str, tier: str) -> str:
    """A capped tier's requests on the engine (EngineSettings.tier_slots)."""
    return f"{{tenantry}}:inflight:engine:{engine}:tier:{tier}"


def others_recent_key(engine: str) -> str:
    """Present while a guaranteed or best-effort request arrived for the engine recently."""
    return f"{{tenantry}}:engine:{engine}:others-recent"


def spot_pause_keys(tier: str, engine: str, pause_seconds: float) -> tuple[tuple[str, float] | None, str | None]:
    """(mark, key to ask): the tiers above spot mark the engine as wanted for `pause_seconds`, spot asks
    whether it is (no pause: neither). Spot's pause follows the others' demand, refused or not: a guaranteed
    request turned away is still a sign the engine is not idle."""
    if not pause_seconds:
        return None, None
    if tier == "spot":
        return None, others_recent_key(engine)
    return (others_recent_key(engine), pause_seconds), None
