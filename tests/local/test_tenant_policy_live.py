"""The tenant-policy plugin inside the real gateway, against real vLLM:
what reaches the engine (its own request log and prefix-cache counters),
admission under a flood, concurrency across two gateway replicas, and fail-safe
behaviour when an engine's metrics disappear."""

from __future__ import annotations

import json
import random
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tenantry.configs.litellm import METRICS_CACHE_SECONDS
from tenantry.gateway import tenant_policy as tp
from tenantry.stacks import plan_stack
from tests.local.conftest import SPEC, gateway_metric, stream_text
from tests.local.held_streams import HeldStreams

WORDS = ("tenant gateway engine model adapter budget quota priority cache salt token prompt output latency "
         "throughput request response batch queue slot memory cluster node pool replica spend key team").split()
ROUTES = [("chat", False), ("chat", True), ("text", False), ("text", True)]


def long_prompt(seed: str, words: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def call(client: httpx.Client, route: str, stream: bool, model: str, text: str, **extra) -> httpx.Response:
    if route == "chat":
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 4, "stream": stream}
        path = "/v1/chat/completions"
    else:
        body = {"model": model, "prompt": text, "max_tokens": 4, "stream": stream}
        path = "/v1/completions"
    body.update(extra)
    if not stream:
        return client.post(path, json=body)
    with client.stream("POST", path, json=body) as response:
        response.read()
        return response


def hits_after(stack, before: float, expect_more: bool) -> float:
    """vLLM's prefix-cache hit counter, once it has moved (or a moment has passed)."""
    deadline = time.monotonic() + (10 if expect_more else 2)
    value = before
    while time.monotonic() < deadline:
        value = stack.engine_metric("tiny", "vllm:prefix_cache_hits_total")
        if expect_more and value > before:
            break
        time.sleep(0.3)
    return value


@pytest.mark.parametrize(("route", "stream"), ROUTES, ids=[f"{r}-{'stream' if s else 'plain'}" for r, s in ROUTES])
def test_cache_salt_isolates_tenants(stack, route, stream):
    text = long_prompt(f"{route}-{stream}-{uuid.uuid4()}")
    with stack.client("acme") as acme, stack.client("globex") as globex:
        assert call(acme, route, stream, "tiny", text).status_code == 200
        first = stack.engine_metric("tiny", "vllm:prefix_cache_hits_total")
        assert call(acme, route, stream, "tiny", text).status_code == 200
        second = hits_after(stack, first, expect_more=True)
        assert second > first, "the same tenant repeating a prompt hits its own cache"
        assert call(globex, route, stream, "tiny", text).status_code == 200
        third = hits_after(stack, second, expect_more=False)
        assert third == second, "another tenant's salt shares nothing"
        # A prompt only acme has sent: globex claiming acme's salt must not reach acme's cache.
        secret = long_prompt(f"acme-only-{uuid.uuid4()}")
        assert call(acme, route, stream, "tiny", secret).status_code == 200
        fourth = hits_after(stack, third, expect_more=False)
        forged = call(globex, route, stream, "tiny", secret, cache_salt="tenant-acme")
        assert forged.status_code == 200
        assert hits_after(stack, fourth, expect_more=False) == fourth, "a forged salt is replaced by the tenant's own"


def _logged_body(stack, marker: str) -> dict:
    """The JSON body vLLM logged for the request whose prompt carries `marker`."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in stack.engine_log("tiny").splitlines():
            if "JSON body:" in line and marker in line:
                return json.loads(line.split("JSON body: ", 1)[1])
        time.sleep(0.3)
    raise AssertionError(f"vLLM logged no request with {marker}")


@pytest.mark.parametrize(("route", "stream"), ROUTES, ids=[f"{r}-{'stream' if s else 'plain'}" for r, s in ROUTES])
def test_priority_and_salt_reach_vllm_and_forgeries_are_replaced(stack, route, stream):
    for tenant, priority, salt in (("initech", 100, None), ("acme", 0, "tenant-acme"), ("globex", 10, "tenant-globex")):
        marker = f"marker-{uuid.uuid4().hex}"
        headers = {"X-Vllm-Priority": "-9"}
        with stack.client(tenant) as client:
            client.headers.update(headers)
            # Forgeries in extra_body or metadata are refused at the front door (test_hostile_requests.py).
            answer = call(client, route, stream, "tiny", f"{marker} hello", priority=-100, cache_salt="forged")
        assert answer.status_code == 200, answer.text
        body = _logged_body(stack, marker)
        assert body.get("priority") == priority, (tenant, body)
        assert body.get("cache_salt") == salt, (tenant, body)


def _metric_total(stack, name: str, **labels: str) -> float:
    return sum(gateway_metric(stack, name, **labels).values())


def test_overrides_and_admissions_are_counted(stack):
    """The counters move by what this test's own two requests caused (replica 0 serves both; nothing
    else sends to the tests' stack meanwhile)."""
    counters = {"overrides": ("tenantry_gateway_overrides_total", {"tenant": "initech", "field": "priority"}),
                "admissions": ("tenantry_gateway_admissions_total", {"tenant": "acme", "decision": "admitted"}),
                "decisions": ("tenantry_gateway_policy_seconds_count", {})}
    before = {key: _metric_total(stack, name, **labels) for key, (name, labels) in counters.items()}
    with stack.client("initech") as initech:
        assert call(initech, "chat", False, "tiny", "counted", priority=-100).status_code == 200
    with stack.client("acme") as acme:
        assert call(acme, "chat", False, "tiny", "counted").status_code == 200
    moved = {key: _metric_total(stack, name, **labels) - before[key] for key, (name, labels) in counters.items()}
    assert moved["overrides"] == 1 and moved["admissions"] == 1 and moved["decisions"] >= 2, moved


def _timed_stream(client: httpx.Client, model: str, max_tokens: int, results: list, **extra) -> None:
    """Appends (status, time to first token, Retry-After, error text, its end and its first token on the
    monotonic clock)."""
    started = time.perf_counter()
    body = {"model": model, "messages": [{"role": "user", "content": "tell me about the cluster"}],
            "max_tokens": max_tokens, "stream": True, "min_tokens": max_tokens, "ignore_eos": True, **extra}
    first = None
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            response.read()
            results.append((response.status_code, None, response.headers.get("retry-after"), response.text,
                            time.perf_counter(), None))
            return
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and '"content"' in line:
                first = time.perf_counter()
    results.append((200, first - started, None, "", time.perf_counter(), first))


def _warm(stack, *tenants_on_replicas: tuple[str, int]) -> None:
    """One request per tenant and replica first: a replica's first request
    for a key looks it up and builds clients, which on a saturated machine
    takes seconds and would be measured as admission."""
    for tenant, replica in tenants_on_replicas:
        with stack.client(tenant, replica=replica) as client:
            answer = client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "warm"}], "max_tokens": 1})
            assert answer.status_code == 200, answer.text


def _past_the_metrics_cache() -> None:
    """Called once the engine is full: every load the gateway fetched before (the warm-up's, an earlier test's)
    is then older than the plugin's cache, so spot's next request waits for a scrape of the full engine. Spot is
    judged on a state up to METRICS_CACHE_SECONDS old by design; a probe sent sooner (CI, a fresh clone of
    e6d6dc6: the engine filled in under a second after the warm-up) was admitted on the idle engine's state and
    waited on the paused engine until the client's timeout."""
    time.sleep(METRICS_CACHE_SECONDS)


def _until_spot_is_shed_as_saturated(stack, replica: int, deadline: float) -> None:
    """Ask as the spot tenant until the gateway replica sheds it for the engine's
    queue. Spot is judged on a scrape made as it asks; a saturated engine's
    /metrics may not answer within the plugin's timeout, and spot is then shed
    as "load unknown" instead: ask again until the replica has seen the queue."""
    _past_the_metrics_cache()
    with stack.client("initech", replica=replica) as initech:
        while True:
            try:
                answer = initech.post("/v1/chat/completions", json={
                    "model": "tiny", "messages": [{"role": "user", "content": "probe"}], "max_tokens": 1})
            except httpx.ReadTimeout:  # a shed answers at once; an admitted probe waits on the paused engine
                raise AssertionError("spot admitted on a saturated engine: no answer while it is paused") from None
            assert answer.status_code == 429, f"spot admitted on a saturated engine: {answer.text}"
            if answer.headers.get(tp.SHED_HEADER) == "saturated":
                return
            assert answer.headers.get(tp.SHED_HEADER) == "metrics", answer.headers
            assert time.monotonic() < deadline, "the gateway never saw the engine's queue"
            time.sleep(0.5)


def test_a_spot_flood_is_shed_while_the_guaranteed_tenant_is_served(stack):
    """Engine tiny full and queueing: its max_num_seqs of long spot-priority streams running and as many queued,
    sent straight to the engine (on a cluster, long prompts or a second platform do that; through the gateway
    alone admission never lets the engine queue). Spot through the gateway is shed for the queue, each refusal
    with tenantry's reason and a Retry-After. acme, guaranteed, is served, and vLLM's priority scheduling runs
    its requests ahead of the spot-priority streams queued before them: every acme stream is done while none of
    those has ended. First come, first served would run the queued streams in the first free slots, acme only
    after their 1,800 tokens each; acme's 16 take the first free slots instead. (Comparing acme's first tokens
    with spot requests sent beside it, as this test did, raced: CI saw both scheduled in the same step, the spot
    ones' tokens reaching their client a fraction of a millisecond sooner, not through the gateway.)"""
    tiny = plan_stack(str(SPEC)).engine("tiny")
    capacity = tiny.kv.max_num_seqs
    # acme's reserved slots: past them, a full engine would send acme to its overload fallback instead.
    reserved = next(r.slots for r in tiny.slots.reserved if r.tenant == "acme")
    _warm(stack, ("initech", 0), ("acme", 1))
    assert stack.engine_slots_free("tiny") == {}
    spot: list = []
    guaranteed: list = []
    at_engine = [httpx.Client(base_url=stack.engine_url("tiny"), timeout=300) for _ in range(2 * capacity)]
    try:
        with HeldStreams(stack, "tiny", at_engine, queued=capacity, extra={"priority": 100}) as held:
            _until_spot_is_shed_as_saturated(stack, 0, time.monotonic() + 60)
            with stack.client("initech", replica=0) as initech:
                for _ in range(8):
                    _timed_stream(initech, "tiny", 16, spot)
            held.still_held()
            queued = held.waiting()
            assert len(queued) == capacity, held.told()
            offset = held.log_size()
            with stack.client("acme", replica=1) as acme, ThreadPoolExecutor(reserved) as pool:
                served = [pool.submit(_timed_stream, acme, "tiny", 16, guaranteed) for _ in range(reserved)]
                deadline = time.monotonic() + 60
                while (added := held.added_since(offset)) < reserved:  # all in the paused engine's queue
                    assert time.monotonic() < deadline, (f"{added} of {reserved} reached the engine", guaranteed)
                    time.sleep(0.05)
                ended_first, finished = _engine_order(stack, held, queued, finish_first=capacity + reserved)
                held.release()
                for future in served:
                    future.result(timeout=300)
            told = held.told()
    finally:
        for client in at_engine:
            client.close()
    assert [r[0] for r in spot] == [429] * 8, spot
    assert all(r[2] and int(r[2]) > 0 for r in spot), "a shed request says when to retry"
    assert all(re.search(r"engine tiny[: ].*spot traffic paused", r[3]) for r in spot), spot
    assert [r[0] for r in guaranteed] == [200] * reserved, guaranteed
    # The order is vLLM's: acme's priority 0 ahead of the priority-100 streams that queued before it.
    assert ended_first == [], (f"queued spot streams {ended_first} ended before the engine had finished the running "
                               f"streams and acme's ({finished} finished)", guaranteed, told)


def _engine_order(stack, held: HeldStreams, queued: list[int], finish_first: int) -> tuple[list[int], float]:
    """The engine run in bursts, paused between them, until it has finished `finish_first` more requests by its own
    count (vllm:request_success_total): the queued holders that had ended by then, each read straight from the
    engine. acme's answers are judged where vLLM finishes them, not when the gateway has relayed them: under load
    the relay took 11 s, longer than a queued stream's 1,800 tokens (a fresh clone of 5e4b2b3, 2026-12-07)."""
    before = stack.engine_metric("tiny", "vllm:request_success_total")
    deadline = time.monotonic() + 300
    while (finished := stack.engine_metric("tiny", "vllm:request_success_total") - before) < finish_first:
        assert time.monotonic() < deadline, (f"the engine finished {finished} of {finish_first} in 300 s", held.told())
        held.burst()
    return [i for i in queued if held.done[i].is_set()], finished


def test_a_tenants_concurrency_is_capped_across_both_gateway_replicas(stack):
    """acme may hold 4 requests in flight (max_concurrency in tests/local/stack.yaml). Four long streams held
    open over both replicas take them all; a fifth is refused for the tenant's own limit whichever replica gets
    it, while vLLM itself runs exactly four; once the streams are gone, acme is admitted again."""
    limit = plan_stack(str(SPEC)).tenant("acme").max_concurrency
    assert limit == 4
    _warm(stack, ("acme", 0), ("acme", 1))
    assert stack.engine_slots_free("tiny") == {}
    ask = {"model": "tiny", **HeldStreams.BODY, "stream": False, "max_tokens": 4}
    clients = [stack.client("acme", replica=i % 2) for i in range(limit)]
    try:
        with HeldStreams(stack, "tiny", clients) as held:
            running = stack.engine_metric("tiny", "vllm:num_requests_running")
            refusals = []
            for replica in (0, 1):  # each waits its brief wait for a slot: none can end while the engine is held
                with stack.client("acme", replica=replica) as acme:
                    refusals.append(acme.post("/v1/chat/completions", json=ask))
            held.still_held()
        for refused in refusals:
            assert refused.status_code == 429 and f"its limit is {limit}" in refused.text, refused.text
            assert tp.SHED_HEADER not in refused.headers  # the tenant's own limit, not a shed for capacity
        assert running == limit  # vLLM's own count, over both replicas
        assert stack.engine_slots_free("tiny") == {}
        answer = clients[0].post("/v1/chat/completions", json=ask)
        assert answer.status_code == 200, answer.text
    finally:
        for client in clients:
            client.close()


def test_spot_runs_at_most_its_tiers_cap_on_the_engine_as_vllm_counts_it(stack):
    """tests/local/stack.yaml caps spot at 3 sequences per engine; initech (spot) may hold 4 in flight. Three
    long streams held open over both replicas fill the cap, and the fourth is refused whichever replica gets it,
    while vLLM itself runs exactly three; once one stream is gone, spot is admitted again."""
    cap = plan_stack(str(SPEC)).engine("tiny").slots.spot_max
    assert cap == 3
    _warm(stack, ("initech", 0), ("initech", 1))
    assert stack.engine_slots_free("tiny") == {}
    ask = {"model": "tiny", **HeldStreams.BODY, "stream": False, "max_tokens": 4}
    clients = [stack.client("initech", replica=i % 2) for i in range(cap + 1)]
    try:
        with HeldStreams(stack, "tiny", clients[:cap]) as held:
            running = stack.engine_metric("tiny", "vllm:num_requests_running")
            refusals = []
            for replica in (0, 1):
                with stack.client("initech", replica=replica) as initech:
                    refusals.append(initech.post("/v1/chat/completions", json=ask))
            held.still_held()
        for refused in refusals:
            assert refused.status_code == 429 and refused.headers.get(tp.SHED_HEADER) == "tier-slots", refused.text
            assert f"spot traffic has {cap} of the {cap} slots" in refused.text
        assert running == cap  # vLLM's own count: the cap's three, nothing more
        # The streams are closed: their slots come back as the gateway sees each one end, and spot is admitted.
        assert stack.engine_slots_free("tiny") == {}
        answer = clients[cap].post("/v1/chat/completions", json=ask)
        assert answer.status_code == 200, answer.text
    finally:
        for client in clients:
            client.close()


def test_a_request_its_engine_has_no_room_for_is_served_by_the_tenants_overload_fallback(stack):
    """globex (best-effort) lists micro as its overload fallback (tests/local/stack.yaml). tiny's five unreserved
    slots held open, three by spot (its tier's cap) and two by globex: globex's next requests to tiny, plain and
    streamed (its third in flight), are served by micro (vLLM's own count; LiteLLM names the model asked for on the
    answer), say so in X-Tenantry-Rerouted, and are counted; none is refused."""
    plan = plan_stack(str(SPEC))
    assert plan.tenant("globex").overload_fallback == ("micro",) and plan.engine("tiny").slots.shared == 5
    _warm(stack, ("initech", 0), ("globex", 0))
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    before = gateway_metric(stack, "tenantry_gateway_rerouted_total", by="to", tenant="globex").get("micro", 0.0)
    micro_served = stack.engine_metric("micro", "vllm:request_success_total")
    # CI once answered the plain request from tiny itself: a holder rerouted to micro for slots an earlier test's
    # streams still held, which then came free. Start from none held, and hold every slot on tiny itself
    # (HeldStreams checks none was rerouted, and keeps tiny paused so that none ends during the probe).
    assert stack.engine_slots_free("tiny") == {}
    holders = [stack.client("initech") for _ in range(3)] + [stack.client("globex") for _ in range(2)]
    try:
        with HeldStreams(stack, "tiny", holders) as held:
            holding = stack.engine_slots_held("tiny")
            with stack.client("globex") as globex:
                plain = globex.post("/v1/chat/completions", json=ask)
                with globex.stream("POST", "/v1/chat/completions", json={**ask, "stream": True}) as streamed:
                    chunks = stream_text(streamed)
            held.still_held()
        assert holding == {"shared": 5, "tier:spot": 3}, holding
        assert plain.status_code == 200, plain.text
        assert plain.headers.get(tp.REROUTE_HEADER) == "tiny -> micro (shared-slots)", (plain.headers, holding)
        assert streamed.status_code == 200 and chunks
        assert streamed.headers.get(tp.REROUTE_HEADER) == "tiny -> micro (shared-slots)"
    finally:
        for client in holders:
            client.close()
    rerouted = gateway_metric(stack, "tenantry_gateway_rerouted_total", by="to", tenant="globex").get("micro", 0.0)
    served = stack.engine_metric("micro", "vllm:request_success_total")
    # Each reroute was served by micro: the two probes, nothing else.
    assert rerouted - before == served - micro_served == 2


def test_unknown_engine_load_pauses_spot_but_never_guaranteed(stack):
    with stack.engine_stopped("tiny"):
        # Past the Plan's metrics_max_age_seconds, the last sample of the stopped engine is stale: the
        # effect under test is an age, so this wait is the test (tests/unit/test_test_rules.py allows it).
        time.sleep(stack.up.plan.gateway.metrics_max_age_seconds + 1)
        with stack.client("initech") as initech:
            answer = initech.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert answer.status_code == 429 and "metrics unavailable" in answer.text, answer.text
        micro_served = stack.engine_metric("micro", "vllm:request_success_total")
        with stack.client("acme") as acme:
            answer = acme.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert answer.status_code == 200, answer.text
        # Admitted, then served by the fallback engine: micro counts it as its own, once.
        assert stack.engine_served_since("micro", micro_served) == 1


def test_streams_survive_the_plugin(stack):
    with stack.client("globex") as globex:
        with globex.stream("POST", "/v1/completions", json={"model": "globex-legal", "prompt": "hi", "max_tokens": 8,
                                                            "stream": True}) as response:
            assert response.status_code == 200 and stream_text(response)
