"""The engines' live load as the tenant-policy plugin reads it: vLLM's
/metrics per replica or Prometheus, cached, and never waited for once a state
is known."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx
import pytest

from tests.unit.policy_plugin import engine_metrics, local_settings, run


def test_vllm_metrics_are_read_for_the_right_model():
    text = (
        '# HELP vllm:num_requests_running Number of requests in model execution batches.\n'
        'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0\n'
        'vllm:num_requests_running{engine="0",model_name="micro"} 7.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 9.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25\n'
    )
    assert engine_metrics.parse_vllm_metrics(text, "tiny") == (3.0, 2.0, 0.25)


def test_a_request_never_waits_for_a_slow_scrape_once_a_state_is_known():
    metrics = engine_metrics.EngineMetrics(local_settings())
    answer = asyncio.Event()
    scrapes = []

    async def slow_fetch(engine):  # a busy engine's /metrics, answering when the test says so
        scrapes.append(engine)
        await answer.wait()
        return 7.0, 3.0, 0.5, 1, time.time()

    metrics._fetch = slow_fetch

    async def scenario():
        first = asyncio.ensure_future(metrics.state("tiny"))
        await asyncio.sleep(0)
        assert not first.done()  # nothing known yet: the first request waits for the first scrape
        answer.set()
        assert (await first).waiting == 3.0
        answer.clear()
        expired = time.time() - 5
        metrics._states["tiny"] = engine_metrics.EngineState(running=1.0, waiting=0.0, kv_usage=0.1, replicas=1,
                                                             sampled_at=expired, fetched_at=expired)
        # Returns the last known state at once (a hang here would be the bug), and starts one refresh.
        stale = await asyncio.wait_for(metrics.state("tiny"), timeout=30)
        again = await asyncio.wait_for(metrics.state("tiny"), timeout=30)
        assert stale.running == again.running == 1.0 and scrapes == ["tiny", "tiny"]
        answer.set()
        await metrics._refreshes["tiny"]
        assert (await metrics.state("tiny")).running == 7.0

    run(scenario())


def on_prometheus(answer):  # noqa: ANN001, ANN201
    """EngineMetrics reading the load from a Prometheus that answers each query with `answer(query)`."""
    settings = local_settings()
    settings = dataclasses.replace(settings, metrics=dataclasses.replace(settings.metrics,
                                                                         prometheus_url="http://prometheus:9090"))

    def prometheus(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        return httpx.Response(200, json={"status": "success",
                                         "data": {"resultType": "vector", "result": answer(query)}})

    return engine_metrics.EngineMetrics(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(prometheus)))


def on_local_metrics(text, replicas=2):  # noqa: ANN001, ANN201
    """EngineMetrics scraping each of tiny's replicas' /metrics, every one answering `text`."""
    settings = local_settings()
    urls = tuple(f"http://127.0.0.1:{18110 + i}/metrics" for i in range(replicas))
    tiny = dataclasses.replace(settings.engines["tiny"], metrics_urls=urls)
    settings = dataclasses.replace(settings, engines={**settings.engines, "tiny": tiny})
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(200, text=text)))
    return engine_metrics.EngineMetrics(settings, client=client)


def test_on_kubernetes_the_load_comes_from_prometheus_summed_over_replicas():
    queries = []
    sampled = time.time() - 2

    def answer(query):  # noqa: ANN001, ANN202
        queries.append(query)
        value = {"sum": "5", "max": "0.5", "count": "3", "min": str(sampled)}[query.split("(")[0]]
        return [{"metric": {}, "value": [time.time(), value]}]

    state = run(on_prometheus(answer).state("tiny"))
    assert (state.running, state.waiting, state.kv_usage, state.replicas, state.sampled_at) == (5.0, 5.0, 0.5, 3,
                                                                                                  sampled)
    assert queries == ['sum(vllm:num_requests_running{model_name="tiny"})',
                       'sum(vllm:num_requests_waiting{model_name="tiny"})',
                       'max(vllm:kv_cache_usage_perc{model_name="tiny"})',
                       'count(vllm:num_requests_running{model_name="tiny"})',
                       'min(timestamp(vllm:num_requests_running{model_name="tiny"}))']


def test_an_engine_missing_from_prometheus_is_unknown_not_idle():
    # The aggregate of no series is an empty result, not 0: an engine Prometheus
    # lost (its target down, its labels changed) must not read as one with nothing to do.
    assert run(on_prometheus(lambda query: []).state("tiny")) is None


def test_a_sample_prometheus_holds_is_as_old_as_its_own_timestamp_not_the_query():
    # An instant query's value carries the evaluation time (now); the sample's own
    # time, from timestamp(), is a minute old: the state is not fresh.
    sampled = time.time() - 60

    def answer(query):  # noqa: ANN001, ANN202
        value = str(sampled) if query.startswith("min(timestamp(") else "0"
        return [{"metric": {}, "value": [time.time(), value]}]

    state = run(on_prometheus(answer).state("tiny"))
    max_age = local_settings().admission.metrics_max_age_seconds
    assert state.sampled_at == sampled and not state.fresh(max_age, time.time())


def test_an_engines_metrics_without_the_models_series_are_unknown_not_idle():
    other_model = ('vllm:num_requests_running{engine="0",model_name="micro"} 0.0\n'
                   'vllm:num_requests_waiting{engine="0",model_name="micro"} 0.0\n'
                   'vllm:kv_cache_usage_perc{engine="0",model_name="micro"} 0.0\n')
    assert run(on_local_metrics(other_model).state("tiny")) is None
    assert run(on_local_metrics(other_model, replicas=0).state("tiny")) is None  # no /metrics to read, no Prometheus
    with pytest.raises(engine_metrics.MissingSeries, match="model tiny"):
        engine_metrics.parse_vllm_metrics(other_model, "tiny")


def test_a_direct_scrape_is_as_old_as_the_scrape():
    text = ('vllm:num_requests_running{engine="0",model_name="tiny"} 1.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.1\n')
    before = time.time()
    state = run(on_local_metrics(text).state("tiny"))
    assert state.running == 2.0  # one running request on each of two replicas
    assert state.replicas == 2
    assert before <= state.sampled_at <= state.fetched_at <= time.time()
