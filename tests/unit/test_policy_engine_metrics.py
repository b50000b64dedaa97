"""The engines' live load as the tenant-policy plugin reads it: vLLM's
/metrics per replica or Prometheus, cached, and never waited for once a state
is known."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx

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
        return 7.0, 3.0, 0.5

    metrics._fetch = slow_fetch

    async def scenario():
        first = asyncio.ensure_future(metrics.state("tiny"))
        await asyncio.sleep(0)
        assert not first.done()  # nothing known yet: the first request waits for the first scrape
        answer.set()
        assert (await first).waiting == 3.0
        answer.clear()
        metrics._states["tiny"] = engine_metrics.EngineState(1.0, 0.0, 0.1, time.time() - 5)  # expired
        # Returns the last known state at once (a hang here would be the bug), and starts one refresh.
        stale = await asyncio.wait_for(metrics.state("tiny"), timeout=30)
        again = await asyncio.wait_for(metrics.state("tiny"), timeout=30)
        assert stale.running == again.running == 1.0 and scrapes == ["tiny", "tiny"]
        answer.set()
        await metrics._refreshes["tiny"]
        assert (await metrics.state("tiny")).running == 7.0

    run(scenario())


def test_on_kubernetes_the_load_comes_from_prometheus_summed_over_replicas():
    settings = local_settings()
    settings = dataclasses.replace(settings, metrics=dataclasses.replace(settings.metrics,
                                                                         prometheus_url="http://prometheus:9090"))
    queries = []

    def prometheus(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        queries.append(query)
        value = {"sum": "5", "max": "0.5"}[query.split("(")[0]]
        return httpx.Response(200, json={"data": {"result": [{"value": [0, value]}]}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(prometheus))
    metrics = engine_metrics.EngineMetrics(settings, client=client)
    state = run(metrics.state("tiny"))
    assert (state.running, state.waiting, state.kv_usage) == (5.0, 5.0, 0.5)
    assert queries == ['sum(vllm:num_requests_running{model_name="tiny"})',
                       'sum(vllm:num_requests_waiting{model_name="tiny"})',
                       'max(vllm:kv_cache_usage_perc{model_name="tiny"})']
