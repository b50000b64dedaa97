"""Requests in flight as the tenant-policy plugin counts them in Redis, shared
by every gateway replica (a real Redis, started here)."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.policy_plugin import ledger, redis_server, run


@pytest.fixture
def redis_url(tmp_path):
    with redis_server(tmp_path) as url:
        yield url


def test_a_claim_checks_and_takes_in_one_step(redis_url):
    import redis.asyncio as aioredis

    replicas = [ledger.Ledger(aioredis.from_url(redis_url)) for _ in range(2)]
    limits = {ledger.tenant_set("globex"): 3, ledger.shared_set("micro"): 3}
    assert run(replicas[0].claim("one", limits)) and run(replicas[1].claim("two", limits))

    async def race():  # both replicas counted 2 of 3; only one may take the last slot
        return await asyncio.gather(replicas[0].claim("three", limits), replicas[1].claim("four", limits))

    assert sorted(run(race())) == [False, True]
    assert run(replicas[0].counts(*limits)) == ([3, 3], False)


def test_a_removed_request_frees_its_slots_and_an_expired_one_frees_them_on_its_own(redis_url):
    import redis
    import redis.asyncio as aioredis

    replica = ledger.Ledger(aioredis.from_url(redis_url))
    limits = {ledger.tenant_set("globex"): 1, ledger.shared_set("micro"): 2}
    assert run(replica.claim("one", limits))
    assert not run(replica.claim("two", limits))  # globex's one slot is taken
    run(replica.remove("one", *limits))
    assert run(replica.claim("two", limits))
    redis.Redis.from_url(redis_url).zadd(ledger.tenant_set("globex"), {"two": 1})  # as if it had expired long ago
    assert run(replica.counts(*limits)) == ([0, 1], False)


def test_the_others_mark_lives_as_long_as_the_pause(redis_url):
    import redis
    import redis.asyncio as aioredis

    replica = ledger.Ledger(aioredis.from_url(redis_url))
    key = ledger.others_recent_key("tiny")
    assert run(replica.counts(others_key=key)) == ([], False)
    run(replica.counts(others_mark=(key, 0.2)))
    assert run(replica.counts(others_key=key)) == ([], True)
    # It lives the pause's 200 ms in Redis; its expiry, done at once here rather than waited for, ends the pause.
    client = redis.Redis.from_url(redis_url)
    assert 0 < client.pttl(key) <= 200
    client.delete(key)
    assert run(replica.counts(others_key=key)) == ([], False)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_dead_replicas_slots_lapse_with_its_lease_and_a_live_ones_are_renewed(redis_url):
    import redis.asyncio as aioredis

    clock = Clock()
    live, dead = (ledger.Ledger(aioredis.from_url(redis_url), clock=clock) for _ in range(2))
    limits = {ledger.tenant_set("acme"): 2, ledger.shared_set("tiny"): 4}
    assert run(live.claim("streaming", limits)) and run(dead.claim("killed", limits))
    assert not run(live.claim("third", limits))  # acme holds both its slots
    for _ in range(6):  # a minute of a long stream: the live replica renews, the dead one cannot
        clock.now += ledger.RENEW_EVERY_SECONDS
        assert run(live.renew()) == 1
    assert run(live.counts(*limits)) == ([1, 1], False)  # the dead replica's request is gone within the lease
    assert run(live.claim("third", limits))  # and its slot is acme's again
    run(live.remove("streaming", *limits))
    run(live.remove("third", *limits))
    clock.now += ledger.RENEW_EVERY_SECONDS
    assert run(live.renew()) == 0 and run(live.counts(*limits)) == ([0, 0], False)  # removed is never brought back


def test_a_claim_never_released_is_renewed_no_longer_than_a_request_can_run(redis_url):
    import redis.asyncio as aioredis

    clock = Clock()
    replica = ledger.Ledger(aioredis.from_url(redis_url), clock=clock)
    limits = {ledger.tenant_set("acme"): 1}
    assert run(replica.claim("leaked", limits))
    while clock.now - 1_000_000.0 <= ledger.HELD_AT_MOST_SECONDS:
        clock.now += ledger.RENEW_EVERY_SECONDS
        run(replica.renew())
    assert replica.held == {}
    clock.now += ledger.LEASE_SECONDS
    assert run(replica.counts(*limits)) == ([0], False)


def test_a_claim_starts_the_renewal_and_it_ends_with_the_last_request(redis_url):
    import redis.asyncio as aioredis

    replica = ledger.Ledger(aioredis.from_url(redis_url))
    limits = {ledger.tenant_set("acme"): 1}
    assert run(replica.claim("one", limits))
    task = replica._renewing
    assert task is not None and not task.done()
    run(replica.remove("one", *limits))
    task.cancel()


def test_after_redis_fails_the_ledger_answers_at_once_for_a_moment_then_asks_again(redis_url):
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

    unavailable = (RedisError, OSError)  # what the plugin's fail-safe catches
    clock = Clock()
    connects = []
    gone = aioredis.Redis(host="127.0.0.1", port=9, socket_timeout=0.2, retry=None)
    original = gone.connection_pool.get_connection

    async def counted(*args, **kwargs):
        connects.append(clock.now)
        return await original(*args, **kwargs)

    gone.connection_pool.get_connection = counted
    replica = ledger.Ledger(gone, clock=clock)
    limits = {ledger.tenant_set("acme"): 1}
    for attempt in (lambda: replica.counts(*limits), lambda: replica.claim("one", limits)):
        with pytest.raises(unavailable):
            run(attempt())
    assert len(connects) == 1  # the claim, a moment later, did not try Redis again
    clock.now += ledger.AWAY_SECONDS
    with pytest.raises(unavailable):
        run(replica.counts(*limits))
    assert len(connects) == 2


def test_the_gateways_redis_client_tries_twice_then_gives_up(monkeypatch):
    """Against a server that hangs up on every connection: one attempt and one retry (redis-py 8's
    default, ten retries with backoff, kept each request of an outage waiting 3.3 s)."""
    import socket
    import threading

    from redis.exceptions import ConnectionError as RedisConnectionError

    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def hang_up() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            connection.close()

    threading.Thread(target=hang_up, daemon=True).start()
    monkeypatch.setenv("REDIS_PORT", str(server.getsockname()[1]))
    try:
        with pytest.raises(RedisConnectionError):
            run(ledger.redis_from_environment().zcard("x"))
    finally:
        server.close()
    assert len(accepted) == 2


def test_a_lost_claim_names_the_set_that_was_full(redis_url):
    import redis.asyncio as aioredis

    replica = ledger.Ledger(aioredis.from_url(redis_url))
    tenant, shared = ledger.tenant_set("acme"), ledger.shared_set("tiny")
    assert run(replica.claim_or_full("one", {tenant: 1, shared: 4})) is None
    assert run(replica.claim_or_full("two", {tenant: 1, shared: 4})) == tenant  # its own limit
    assert run(replica.claim_or_full("three", {ledger.tenant_set("globex"): 2, shared: 1})) == shared  # the engine's
