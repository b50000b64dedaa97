"""A real local stack for the integration tests: vLLM (CPU), LiteLLM in
database mode, PostgreSQL, Redis and Prometheus, started once per session in
a directory of its own and on ports of its own (so a developer's stack keeps
running), in the background as the session begins (tests/live_stacks.py), and
stopped at the end by the same `down` users run."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tenantry.local.health import LocalStackError
from tenantry.local.layout import Layout
from tenantry.local.models import job_for
from tenantry.local.stack import UpResult
from tenantry.local.supervisor import restart_engine_if_stopped, stop_engine
from tests import live_stacks

SPEC = live_stacks.TESTS.spec


@dataclass
class RunningStack:
    layout: Layout
    up: UpResult
    master_key: str

    @property
    def url(self) -> str:
        return self.up.gateway_url

    def key(self, tenant: str) -> str:
        return self.up.keys[tenant]

    def client(self, tenant: str | None = None, timeout: float = 120, replica: int = 0) -> httpx.Client:
        token = self.key(tenant) if tenant else self.master_key
        return httpx.Client(base_url=self.up.gateway_urls[replica], headers={"Authorization": f"Bearer {token}"},
                            timeout=timeout)

    def engine_url(self, engine: str) -> str:
        return f"http://127.0.0.1:{self.up.ports.engines[engine]}"

    def engine_metric(self, engine: str, name: str) -> float:
        """A counter or gauge straight from the engine's /metrics (vLLM's own view)."""
        text = httpx.get(f"{self.engine_url(engine)}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") and f'model_name="{engine}"' in line)

    def engine_served_since(self, engine: str, before: float, seconds: float = 10) -> float:
        """How many requests the engine has finished since its vllm:request_success_total read `before`, once
        it has moved: vLLM's output loop counts a request as it hands the answer over, so the count may trail
        the answer the client holds by a step."""
        deadline = time.monotonic() + seconds
        while (now := self.engine_metric(engine, "vllm:request_success_total")) == before and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        return now - before

    def engine_log(self, engine: str) -> str:
        """The engine's log, with what supervisor has rotated away (oldest first)."""
        current = self.layout.logs / f"engine-{engine}.log"
        files = [*sorted(self.layout.logs.glob(f"engine-{engine}.log.*"), reverse=True), current]
        return "".join(path.read_text(errors="replace") for path in files if path.exists())

    @contextlib.contextmanager
    def engine_stopped(self, engine: str):
        """Stop an engine for the duration, then start it and wait until it is healthy again."""
        stop_engine(self.layout, engine)
        try:
            yield
        finally:
            restart_engine_if_stopped(self.layout, self.up.plan, engine)

    def _redis(self):
        import redis

        from tenantry.local.credentials import redis_password

        return redis.Redis(host="127.0.0.1", port=self.up.ports.redis, password=redis_password(self.layout),
                           decode_responses=True)

    def engine_slots_held(self, engine: str) -> dict[str, int]:
        """The admission ledger's live claims on an engine (tenantry.gateway.tenant_policy_ledger), by set."""
        with contextlib.closing(self._redis()) as client:
            now = time.time()
            return {name.rsplit(f"engine:{engine}:", 1)[1]: client.zcount(name, now, "+inf")
                    for name in client.scan_iter(match=f"{{tenantry}}:inflight:engine:{engine}:*")
                    if client.zcount(name, now, "+inf")}

    def engine_slots_free(self, engine: str, seconds: float = 60) -> dict[str, int]:
        """Wait (at most `seconds`) until no request holds a slot of the engine in the ledger: a test that
        fills an engine's slots starts from none, not from what an earlier test's streams still hold as
        the gateway sees them end. What is still held then (empty when all is free)."""
        deadline = time.monotonic() + seconds
        while (held := self.engine_slots_held(engine)) and time.monotonic() < deadline:
            time.sleep(0.5)
        return held

    def rate_windows_ended(self, *of: str) -> float:
        """Wait until every rate-limit window open now (or those whose key names one of `of`: a team's id, a
        key's hash) has ended, and return the seconds waited. LiteLLM's
        limiter counts a team's (and a key's) requests and tokens in a fixed minute that opens with its first
        request and is kept in Redis as "{team:<id>}:window", expiring as the minute ends; a test after one
        that loaded a tenant would otherwise start with that tenant's TPM or RPM partly spent (CI, 22bfaeb:
        two of the hostile-tenant probes were answered 429 after the gate's scenarios spent acme's TPM)."""
        started = time.monotonic()
        deadline = started + 65  # a window lasts a minute
        with contextlib.closing(self._redis()) as client:
            # Redis expires each window as its minute ends: this polls for that, rather than sleeping a TTL.
            while windows := [key for key in client.scan_iter(match="*:window") if client.ttl(key) != -1
                              and (not of or any(name in key for name in of))]:
                assert time.monotonic() < deadline, f"rate windows still open after a minute: {windows}"
                time.sleep(0.5)
        return time.monotonic() - started

    def rate_windows_open(self) -> dict[str, float]:
        """Every rate-limit window open now, and when (time.monotonic()) Redis ends it."""
        with contextlib.closing(self._redis()) as client:
            now = time.monotonic()
            return {key: now + ttl / 1000 for key in client.scan_iter(match="*:window")
                    if (ttl := client.pttl(key)) > 0}

    def team(self, tenant: str) -> dict:
        """The tenant's team as LiteLLM keeps it (its spend and budget)."""
        with self.client() as admin:
            return next(t for t in admin.get("/team/list").json() if t["team_alias"] == tenant)

    @contextlib.contextmanager
    def budget_allowance(self, tenant: str):
        """For the block, the tenant may spend its own budget again, above what it has spent; the Plan's budget
        is set back after. thrifty's budget is a few requests and every gate scenario on this stack sends it
        traffic (the faults' run first), so a test that needs it served cannot count on an unspent budget
        (CI: the dashboards' traffic was answered 422, budget exceeded). Yields the spend before. LiteLLM's
        cached team may take up to a minute to see the allowance: callers retry until served."""
        plan_tenant = self.up.plan.tenant(tenant)
        team = self.team(tenant)
        with self.client() as admin:
            raised = admin.post("/team/update", json={"team_id": team["team_id"],
                                                      "max_budget": team["spend"] + plan_tenant.budget_usd})
            assert raised.status_code == 200, raised.text
            try:
                yield team["spend"]
            finally:
                admin.post("/team/update", json={"team_id": team["team_id"],
                                                  "max_budget": plan_tenant.gateway_max_budget_usd})

    def database_url(self) -> str:
        """LiteLLM's PostgreSQL database, as its gateways reach it."""
        from tenantry.local.credentials import postgres_password

        return f"postgresql://litellm:{postgres_password(self.layout)}@127.0.0.1:{self.up.ports.postgres}/litellm"

    def prometheus(self, query: str) -> list[dict]:
        answer = httpx.get(f"http://127.0.0.1:{self.up.ports.prometheus}/api/v1/query", params={"query": query},
                           timeout=10).json()
        return answer["data"]["result"]


@pytest.fixture(scope="session")
def stack(request) -> RunningStack:
    try:
        result = live_stacks.up(live_stacks.TESTS)  # started in the background as the session began
    except LocalStackError as error:
        pytest.fail(str(error))
    layout = live_stacks.TESTS.layout()
    yield RunningStack(layout, result, (layout.secrets / "master-key").read_text().strip())
    # A failed session keeps the stack's logs in its directory (the next session removes them).
    leftover = live_stacks.down(live_stacks.TESTS, keep_logs=request.session.testsfailed > 0)
    assert leftover == [], f"processes survived supervisor's shutdown and were killed: {leftover}"


WINDOWS_LEFT_OPEN = pytest.StashKey[dict[str, float]]()


@pytest.fixture(scope="module", autouse=True)
def whole_rate_limits(request):
    """A module after one that ran tenants near their contracts (SPENDS_RATE_LIMITS = True: the faults'
    scenarios) starts once the rate-limit windows that module left open have ended, unless it declares
    WAITS_FOR_ITS_OWN_RATE_LIMITS (it needs none, or waits for the ones it needs): otherwise its tenants
    would start with their TPM or RPM partly spent (CI, 22bfaeb: two of the hostile-tenant probes were
    answered 429 after the gate's scenarios spent acme's TPM). Only those windows: the ones a module opens
    itself with a few requests end on their own and spend nobody's contract."""
    stash = request.session.stash
    if stash.get(WINDOWS_LEFT_OPEN, {}) and not getattr(request.module, "WAITS_FOR_ITS_OWN_RATE_LIMITS", False):
        until = max(stash[WINDOWS_LEFT_OPEN].values())
        while time.monotonic() < until:  # Redis ends each window at its TTL: the wait is that time, no guess
            time.sleep(0.5)
        stash[WINDOWS_LEFT_OPEN] = {}
    yield
    if getattr(request.module, "SPENDS_RATE_LIMITS", False):
        stash[WINDOWS_LEFT_OPEN] = request.getfixturevalue("stack").rate_windows_open()


TENANTRY = Path(sys.executable).parent / "tenantry"


def run_tenantry(stack: RunningStack, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """The tenantry command, as a user runs it, against the tests' stack."""
    return subprocess.run([str(TENANTRY), *args, "--dir", str(stack.layout.root), "--port-base",
                           str(stack.layout.port_base)], capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "COLUMNS": "200"})


def gateway_metric(stack: RunningStack, name: str, by: str = "", replica: int = 0, **labels: str) -> dict[str, float]:
    """A metric family's samples summed by one label (`by`; "" sums them all) straight from one gateway
    process's /metrics/: the counters of the process that served a test's requests, which a restart would
    reset, where Prometheus can still show a restarted process's last values for five minutes."""
    import re

    text = httpx.get(f"{stack.up.gateway_urls[replica]}/metrics/",
                     headers={"Authorization": f"Bearer {stack.master_key}"}, timeout=10).text
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            key = (re.search(rf'{by}="([^"]*)"', line) or [None, ""])[1] if by else ""
            totals[key] = totals.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def answers_again_after_idle(base_url: str, path: str, idle_seconds: float) -> bool:
    """Whether a server answers a second request on the same keep-alive connection after it sat idle for
    `idle_seconds`: False when the server closed it meanwhile (the request then finds it closed or reset)."""
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        connection.request("GET", path)
        first = connection.getresponse()
        first.read()
        socket_used = connection.sock
        assert first.status == 200 and not first.will_close, first.headers
        time.sleep(idle_seconds)
        try:
            connection.request("GET", path)
            again = connection.getresponse()
            again.read()
        except (http.client.RemoteDisconnected, ConnectionError):
            return False
        return again.status == 200 and connection.sock is socket_used
    finally:
        connection.close()


def raw_http(url: str, sent: bytes, seconds: float = 60) -> bytes:
    """Send `sent` as raw bytes (a request line, headers, and as much of a body as a test wants sent) and
    nothing more, and return the server's first answer up to its blank line (status line and headers). A
    server that waits for more than was sent answers nothing: b"" after `seconds`."""
    import socket

    parsed = urlsplit(url)
    answer = b""
    with socket.create_connection((parsed.hostname, parsed.port), timeout=seconds) as connection:
        connection.sendall(sent)
        try:
            while b"\r\n\r\n" not in answer and (chunk := connection.recv(65536)):
                answer += chunk
        except TimeoutError:
            pass
    return answer.split(b"\r\n\r\n")[0]


def longest_token(stack, engine: str) -> int:
    """The engine's token with the longest text: biased towards, the engine says nothing else, EOS included."""
    from tokenizers import Tokenizer

    model_dir = Path(job_for(stack.up.plan.engine(engine), stack.layout.models)["model_dir"])
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return max(tokenizer.get_vocab().values(), key=lambda i: len(tokenizer.decode([i])))


def chat(client: httpx.Client, model: str, content: str = "hello", max_tokens: int = 8, **extra) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": content}],
                                                      "max_tokens": max_tokens, **extra})


def stream_text(response: httpx.Response) -> list[dict]:
    chunks = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[6:]))
    return chunks
