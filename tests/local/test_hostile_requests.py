"""A hostile tenant's requests against the live gateway, one case per hole issue 32 found open (the routes
themselves are tests/local/test_hostile_tenant.py's): naming another tenant's model outside the body,
provider-shaped routes, error texts, cooldowns, fan-out, unread bodies, tier caps in other spellings, several
sequences on one admission, client retry settings, the plugin's own metadata, malformed bodies, engine
addresses, team ids, end users and trickled bodies. Each case failed on the gateway before the front door
held requests to docs/security.md's allow-list."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import psycopg
import pytest

from tenantry.gateway import tenant_policy as tp
from tests.local.conftest import raw_http

INFERENCE = {"/v1/chat/completions": "chat", "/chat/completions": "chat", "/v1/completions": "text",
             "/completions": "text"}
ERROR_HEADER = "X-Tenantry-Error"


def body(route: str, model: str = "tiny", text: str = "hi", **fields) -> dict:
    asked = {"messages": [{"role": "user", "content": text}]} if INFERENCE[route] == "chat" else {"prompt": text}
    return {"model": model, **asked, "max_tokens": 4, **fields}


def post(stack, tenant: str | None, path: str, sent: dict | bytes, headers: dict | None = None, **options):
    token = stack.key(tenant) if tenant else "sk-" + uuid.uuid4().hex
    content = sent if isinstance(sent, bytes) else json.dumps(sent).encode()
    return httpx.post(stack.url + path, content=content, timeout=60, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", **(headers or {})}, **options)


def refused(answer: httpx.Response, status: int, says: str) -> str:
    """The answer is tenantry's refusal with `status`, its message containing `says`; the message."""
    assert answer.status_code == status, answer.text[:400]
    assert answer.headers.get(ERROR_HEADER), answer.headers
    message = answer.json()["error"]["message"]
    assert says in message, message
    return message


def reached_the_engine(stack, engine: str, marker: str) -> bool:
    """Whether the engine received a request carrying `marker`: a request of the tenant's own sent after it,
    to the same engine, is logged after anything that came before (vLLM logs each request as it arrives)."""
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    with stack.client("acme") as acme:
        assert acme.post("/v1/completions", json={"model": engine, "prompt": sentinel, "max_tokens": 1}).status_code == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        log = stack.engine_log(engine)
        if sentinel in log:
            return marker in log
        time.sleep(0.2)
    raise AssertionError(f"engine {engine} logged no request with {sentinel}")


@pytest.mark.parametrize("route", list(INFERENCE))
def test_another_tenants_model_named_in_the_query_string_is_refused_and_reaches_no_engine(stack, route):
    marker = f"query-{uuid.uuid4().hex}"
    answer = post(stack, "acme", f"{route}?model=globex-legal", body(route, text=marker))
    refused(answer, 400, "query parameter 'model' is not accepted: name the model in the body")
    assert not reached_the_engine(stack, "tiny", marker)


@pytest.mark.parametrize("path", ["/models/tiny:generateContent", "/models/globex-legal:generateContent",
                                  "/models/globex-legal:streamGenerateContent?alt=sse", "/models/globex-legal:countTokens",
                                  "/v1beta/models/globex-legal:generateContent", "/engines/globex-legal/chat/completions",
                                  "/openai/deployments/globex-legal/chat/completions", "/v1/messages",
                                  "/anthropic/v1/messages", "/v1/responses", "/gemini/v1beta/models/tiny:generateContent"])
def test_provider_shaped_routes_are_closed_at_the_front_door(stack, path):
    google = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 1500}}
    refused(post(stack, "acme", path, google), 404, f"no route {path.split('?')[0]} here")


def test_an_error_names_nothing_of_the_platform(stack):
    """An over-long prompt to an adapter with a fallback listed LiteLLM's whole fallback table."""
    others = {a for t in stack.up.plan.tenants if t.name != "globex" for a in t.adapters}
    ports = {str(p) for p in stack.up.ports.engines.values()}
    context = stack.up.plan.engine("tiny").kv.max_context
    too_long = post(stack, "globex", "/v1/completions", body("/v1/completions", "globex-legal", "tok " * context))
    invalid = post(stack, "acme", "/v1/chat/completions", body("/v1/chat/completions", min_tokens=9))
    messages = [refused(too_long, 400, f"the engine refused the request: This model's maximum context length is "
                                       f"{context} tokens"),
                refused(invalid, 400, "the engine refused the request: min_tokens must be less than or equal to")]
    for message in messages:
        leaked = [w for w in (*others, *ports, "micro", "Fallback", "LiteLLM", "Exception") if w in message]
        assert not leaked, message


def test_a_clients_failure_never_puts_a_model_in_cooldown(stack):
    """A request that makes the engine call fail (custom_llm_provider: lm_studio, as only the master key may now
    send it) put tiny and its fallback in cooldown for every tenant."""
    refused(post(stack, "initech", "/v1/chat/completions", body("/v1/chat/completions", custom_llm_provider="lm_studio")),
            400, "custom_llm_provider: not accepted by this gateway")
    with stack.client() as operator:
        failed = operator.post("/v1/chat/completions", json=body("/v1/chat/completions", custom_llm_provider="lm_studio"))
    assert failed.status_code >= 400, failed.text[:300]
    with stack.client("acme") as acme:
        for model in ("tiny", "micro"):
            answer = acme.post("/v1/chat/completions", json=body("/v1/chat/completions", model))
            assert answer.status_code == 200, answer.text[:300]


@pytest.mark.parametrize("model", ["tiny,tiny,tiny,tiny,tiny,tiny,tiny,tiny", "tiny,micro"])
def test_a_comma_list_of_models_is_a_400_and_reaches_no_engine(stack, model):
    marker = f"fanout-{uuid.uuid4().hex}"
    refused(post(stack, "acme", "/v1/chat/completions", body("/v1/chat/completions", model, marker)), 400,
            "model must name one model, not a comma list")
    assert not reached_the_engine(stack, "tiny", marker) and not reached_the_engine(stack, "micro", marker)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_call_without_a_key_is_a_401_before_its_body_is_sent(stack, method):
    """No body byte is ever sent: a gateway that waited to read it (to the end, with no limit) never answers."""
    path = "/v1/models" if method == "GET" else "/v1/chat/completions"
    head = raw_http(stack.url, f"{method} {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.1 401"), head


def test_a_get_with_a_body_is_a_400_before_its_body_is_sent(stack):
    head = raw_http(stack.url, f"GET /v1/models HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {stack.key('acme')}"
                               "\r\nContent-Length: 62914560\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.1 400"), head


def test_a_body_that_trickles_is_a_408_once_its_read_time_is_over(stack):
    """Part of the body is sent and never the rest: a gateway without a read time waits for it for ever."""
    seconds = stack.up.plan.gateway.request_read_seconds
    head = raw_http(stack.url, f"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer "
                               f"{stack.key('acme')}\r\nContent-Type: application/json\r\nContent-Length: 120\r\n\r\n"
                               '{"model": "tiny", '.encode(), seconds=seconds + 50)
    assert head.startswith(b"HTTP/1.1 408"), head


@pytest.mark.parametrize(("field", "value", "says"), [
    ("max_completion_tokens", 1801, "max_completion_tokens 1801 exceeds the 1800 tokens the spot tier allows"),
    ("extra_body", {"max_tokens": 1801}, "extra_body: not accepted by this gateway"),
    ("extra_body", {"messages": [{"role": "user", "content": "x " * 5000}]}, "extra_body: not accepted by this gateway"),
])
def test_a_tier_cap_holds_in_every_spelling_of_a_length(stack, field, value, says):
    refused(post(stack, "initech", "/v1/chat/completions", body("/v1/chat/completions", max_tokens=5, **{field: value})),
            400, says)


def test_the_larger_of_two_lengths_is_held_to_the_cap(stack):
    sent = body("/v1/chat/completions", max_completion_tokens=5)
    sent["max_tokens"] = 1801
    refused(post(stack, "initech", "/v1/chat/completions", sent), 400, "max_tokens 1801 exceeds the 1800 tokens")
    refused(post(stack, "initech", "/v1/completions", body("/v1/completions", max_completion_tokens=5)), 400,
            "max_completion_tokens: not accepted by this gateway; text completions take max_tokens")


@pytest.mark.parametrize(("route", "fields", "says"), [
    ("/v1/chat/completions", {"n": 8}, "n must be 1"),
    ("/v1/completions", {"n": 8}, "n must be 1"),
    ("/v1/completions", {"prompt": ["hi"] * 8}, "prompt must be one prompt: a list of 8 would run 8 sequences"),
])
def test_one_admission_is_one_sequence(stack, route, fields, says):
    refused(post(stack, "acme", route, body(route, **fields)), 400, says)


@pytest.mark.parametrize(("sent", "headers", "says"), [
    ({"timeout": 0.001}, {}, "timeout: not accepted by this gateway"),
    ({"num_retries": 8}, {}, "num_retries: not accepted by this gateway"),
    ({}, {"x-litellm-num-retries": "8"}, "header x-litellm-num-retries: not accepted by this gateway"),
    ({}, {"x-litellm-timeout": "0.001"}, "header x-litellm-timeout: not accepted by this gateway"),
    ({}, {"x-litellm-model": "globex-legal"}, "header x-litellm-model: not accepted by this gateway"),
])
def test_a_client_cannot_set_the_gateways_retries_timeouts_or_target(stack, sent, headers, says):
    refused(post(stack, "acme", "/v1/chat/completions", body("/v1/chat/completions", **sent), headers), 400, says)


def test_the_plugins_own_metadata_cannot_be_forged(stack):
    answer = post(stack, "acme", "/v1/chat/completions",
                  body("/v1/chat/completions", metadata={tp.REROUTED_FROM: "tiny -> micro (saturated)"}))
    refused(answer, 400, "metadata: not accepted by this gateway")
    assert tp.REROUTE_HEADER not in answer.headers


@pytest.mark.parametrize("tenant", ["acme", None], ids=["tenant-key", "no-key"])
@pytest.mark.parametrize(("sent", "status", "says"), [
    (b'{"model": "tiny", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "deeper than 32 levels"),
    (json.dumps(body("/v1/chat/completions", extra_body="x")).encode(), 400, "extra_body: not accepted"),
    (json.dumps(body("/v1/chat/completions", extra_headers=["x"])).encode(), 400, "extra_headers: not accepted"),
], ids=["nested-5000", "extra_body-string", "extra_headers-list"])
def test_a_malformed_body_is_a_json_4xx_with_or_without_a_key(stack, tenant, sent, status, says):
    """Without a key of the stack's (a made-up one) the body is judged first: LiteLLM answered a plain-text 500."""
    refused(post(stack, tenant, "/v1/chat/completions", sent), status, says)


def test_no_answer_carries_an_engines_address(stack):
    engines = [f"127.0.0.1:{port}" for port in stack.up.ports.engines.values()]
    with stack.client("acme") as acme:
        answers = [acme.post("/v1/chat/completions", json=body("/v1/chat/completions")),
                   acme.post("/v1/completions", json=body("/v1/completions", min_tokens=9)),
                   acme.get("/v1/models")]
        with acme.stream("POST", "/v1/chat/completions", json=body("/v1/chat/completions", stream=True)) as streamed:
            streamed.read()
            answers.append(streamed)
    for answer in answers:
        shown = answer.text + json.dumps(dict(answer.headers))
        assert not [e for e in engines if e in shown], shown[:500]
        assert not {"x-litellm-model-api-base", "x-litellm-version"} & set(answer.headers), answer.headers


def test_a_body_api_key_or_base_is_refused(stack):
    for field in ("api_key", "api_base", "base_url"):
        refused(post(stack, "acme", "/v1/chat/completions", body("/v1/chat/completions", **{field: "http://x"})), 400,
                f"{field}: not accepted by this gateway")


def test_a_tenant_learns_nothing_of_other_teams(stack):
    with stack.client("acme") as acme, stack.client("globex") as globex:
        refused(acme.get("/v1/models", params={"team_id": "x"}), 400, "query parameter 'team_id' is not accepted")
        others = globex.get("/key/info").json()["info"]["team_id"]
        unknown, another = (acme.get("/team/info", params={"team_id": t}) for t in (uuid.uuid4().hex, others))
    assert (unknown.status_code, unknown.json()) == (another.status_code, another.json()) and another.status_code == 403


def test_an_end_user_named_by_a_tenant_leaves_no_row(stack):
    """Every distinct `user` made a row in LiteLLM's global end-user table: the gateway keeps none."""
    user = f"end-user-{uuid.uuid4().hex}"
    with stack.client("acme") as acme:
        answer = acme.post("/v1/chat/completions", json=body("/v1/chat/completions", user=user))
    assert answer.status_code == 200, answer.text[:300]
    request_id = answer.json()["id"]  # the spend log's key
    with psycopg.connect(stack.database_url(), autocommit=True) as connection:
        deadline = time.monotonic() + 60
        while not (logged := connection.execute('SELECT "end_user" FROM "LiteLLM_SpendLogs" WHERE request_id = %s',
                                                (request_id,)).fetchone()):
            assert time.monotonic() < deadline, "the request's spend was never written"
            time.sleep(0.5)
        rows = connection.execute('SELECT COUNT(*) FROM "LiteLLM_EndUserTable" WHERE user_id = %s', (user,)).fetchone()
    assert rows == (0,) and not logged[0], (rows, logged)


def test_a_websocket_is_refused_to_a_tenant(stack):
    head = raw_http(stack.url, f"GET /v1/realtime?model=tiny HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\n"
                               f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                               f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {stack.key('acme')}\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.1 403"), head
