"""Requests in flight, shared by every gateway replica: Redis sorted sets of
request ids scored by expiry, so counts survive across replicas and a crashed
replica's entries expire."""

import time
from typing import Any

SLOT_TTL_SECONDS = 900
"""An admitted request holds its slot until it ends, or this long at most (a
crashed replica must not hold slots for ever)."""


class Ledger:
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


def shared_set(engine: str) -> str:
    return f"{{tenantry}}:inflight:engine:{engine}:shared"


def others_recent_key(engine: str) -> str:
    """Present while a guaranteed or best-effort request arrived for the engine recently."""
    return f"{{tenantry}}:engine:{engine}:others-recent"
