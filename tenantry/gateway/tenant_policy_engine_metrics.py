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

_SAMPLE = re.compile(r'^(vllm:num_requests_running|vllm:num_requests_waiting|vllm:kv_cache_usage_perc)\{([^}]*)\}\s+(\S+)')


@dataclass(frozen=True)
class EngineState:
    running: float
    waiting: float
    kv_usage: float
    fetched_at: float

    def fresh(self, max_age: float, now: float) -> bool:
        return now - self.fetched_at <= max_age


def parse_vllm_metrics(text: str, model_name: str) -> tuple[float, float, float]:
    """(running, waiting, KV usage) for one served model from vLLM's /metrics."""
    values = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.0}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and f'model_name="{model_name}"' in match.group(2):
            values[match.group(1)] = values[match.group(1)] + float(match.group(3))
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
        prometheus_url = self.settings.metrics.prometheus_url
        if prometheus_url is not None:
            return await self._fetch_from_prometheus(prometheus_url, engine)
        running = waiting = kv = 0.0
        for url in self.settings.engines[engine].metrics_urls:
            answer = await self.client.get(url)
            answer.raise_for_status()
            r, w, k = parse_vllm_metrics(answer.text, engine)
            running, waiting, kv = running + r, waiting + w, max(kv, k)
        return running, waiting, kv

    async def _fetch_from_prometheus(self, prometheus_url: str, engine: str) -> tuple[float, float, float]:
        values = []
        for metric in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
            aggregate = "max" if metric.endswith("perc") else "sum"
            query = f'{aggregate}({metric}{{model_name="{engine}"}})'
            answer = await self.client.get(f"{prometheus_url}/api/v1/query", params={"query": query})
            answer.raise_for_status()
            result = answer.json()["data"]["result"]
            values.append(float(result[0]["value"][1]) if result else 0.0)
        return values[0], values[1], values[2]
