"""The engines' live load, as the tenant-policy plugin's admission reads it:
each replica's /metrics (the local stack) or Prometheus (Kubernetes, where one
Service hides the replicas)."""

import asyncio
import logging
import math
import re
import time
from dataclasses import dataclass

import httpx
from tenant_policy_settings import PolicySettings

log = logging.getLogger("tenantry.tenant_policy")

_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_SAMPLE = re.compile(r'^(' + "|".join(_SERIES) + r')\{([^}]*)\}\s+(\S+)')


class MissingSeries(ValueError):
    """The engine's vLLM series are absent from an answer: its load is unknown,
    not idle (an engine that stopped reporting must not read as one with
    nothing to do)."""


@dataclass(frozen=True, kw_only=True)
class EngineState:
    running: float
    waiting: float
    kv_usage: float
    replicas: int
    """How many of the engine's replicas reported: under an autoscaler, more than the Plan's floor."""
    sampled_at: float
    """When the engine reported these figures: the sample's own timestamp in
    Prometheus, the scrape's start when its /metrics is read directly."""
    fetched_at: float
    """When the plugin last asked for them; what its cache and refreshes follow."""

    def fresh(self, max_age: float, now: float) -> bool:
        return now - self.sampled_at <= max_age


def parse_vllm_metrics(text: str, model_name: str) -> tuple[float, float, float]:
    """(running, waiting, KV usage) for one served model from vLLM's /metrics;
    MissingSeries when any of the three is not there for the model."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and f'model_name="{model_name}"' in match.group(2):
            values[match.group(1)] = values.get(match.group(1), 0.0) + float(match.group(3))
    missing = [name for name in _SERIES if name not in values]
    if missing:
        raise MissingSeries(f"the engine's /metrics has no series {', '.join(missing)} for model {model_name}")
    return (values["vllm:num_requests_running"], values["vllm:num_requests_waiting"], values["vllm:kv_cache_usage_perc"])


class EngineMetrics:
    """Engine state, cached for a moment so a burst of requests costs one scrape.

    A request does not wait for a scrape while the known state is young enough
    to act on: an expired one is refreshed in the background and the last
    known state answers meanwhile, because a busy engine's /metrics can take
    seconds to answer and waiting on it would hold every tenant's requests,
    guaranteed ones included, for as long (docs/decisions.md: Engine load is
    refreshed in the background). Only a state older than the caller accepts is
    waited for (see `TenantPolicy._acceptable_age`), and never by a guaranteed
    request."""

    def __init__(self, settings: PolicySettings, client: httpx.AsyncClient | None = None):
        self.settings = settings
        self.cache_seconds = settings.metrics.cache_seconds
        self.client = client or httpx.AsyncClient(timeout=settings.metrics.timeout_seconds)
        self._states: dict[str, EngineState] = {}
        self._refreshes: dict[str, asyncio.Future] = {}

    async def state(self, engine: str, wait_if_older_than: float | None = None) -> EngineState | None:
        """The engine's last known state; a request waits for a scrape (bounded by
        the client's timeout) only when nothing is known yet, or when the state is
        older than `wait_if_older_than`. If that scrape fails, such a caller gets
        None (unknown), never the older state it did not accept. Ages here count
        from when the plugin last asked; `decide` judges the sample's own age."""
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
            running, waiting, kv, replicas, sampled_at = await self._fetch(engine)
        except (httpx.HTTPError, OSError, ValueError, KeyError, IndexError) as error:
            log.warning("tenantry: metrics for engine %s unavailable: %s", engine, error)
            return self._states.get(engine)  # the last known state; `decide` treats it as stale once too old
        state = self._states[engine] = EngineState(running=running, waiting=waiting, kv_usage=kv, replicas=replicas,
                                                   sampled_at=sampled_at, fetched_at=time.time())
        return state

    async def _fetch(self, engine: str) -> tuple[float, float, float, int, float]:
        """(running, waiting, KV usage, replicas reporting, when they were sampled)."""
        prometheus_url = self.settings.metrics.prometheus_url
        if prometheus_url is not None:
            return await self._fetch_from_prometheus(prometheus_url, engine)
        urls = self.settings.engines[engine].metrics_urls
        if not urls:
            raise MissingSeries(f"engine {engine} has no /metrics to read and no Prometheus is set")
        sampled_at = time.time()  # read directly, a replica's figures are as old as the scrape (the first one's)
        running = waiting = kv = 0.0
        for url in urls:
            answer = await self.client.get(url)
            answer.raise_for_status()
            r, w, k = parse_vllm_metrics(answer.text, engine)
            running, waiting, kv = running + r, waiting + w, max(kv, k)
        return running, waiting, kv, len(urls), sampled_at

    async def _fetch_from_prometheus(self, prometheus_url: str, engine: str) -> tuple[float, float, float, int, float]:
        """The load summed over the replicas, how many replicas report it (one series each: what KEDA has added
        shows here as it starts serving), and the oldest replica's sample time.
        An instant query's [time, value] carries the evaluation time, not the
        sample's, and a series stays in its answers for Prometheus's lookback
        after its last scrape: the sample's age comes from `timestamp()`."""
        selector = f'{{model_name="{engine}"}}'
        queries = [f'{"max" if metric.endswith("perc") else "sum"}({metric}{selector})' for metric in _SERIES]
        queries.append(f"count({_SERIES[0]}{selector})")
        queries.append(f"min(timestamp({_SERIES[0]}{selector}))")
        values = []
        for query in queries:
            answer = await self.client.get(f"{prometheus_url}/api/v1/query", params={"query": query})
            answer.raise_for_status()
            result = answer.json()["data"]["result"]
            if not result:
                raise MissingSeries(f"Prometheus has no series for {query}")
            values.append(float(result[0]["value"][1]))
        return values[0], values[1], values[2], int(values[3]), values[4]
