"""The gateway's front door (tenant_policy_front_door) as plain ASGI: the (method, route) pairs a caller
without the master key reaches, what it may put in the query string and headers, bodies refused before
they are read, as they pass the limit or when they trickle, and what comes back. Live, against LiteLLM:
tests/local/test_hostile_tenant.py and tests/local/test_hostile_requests.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

import pytest

from tests.unit.policy_plugin import errors, front_door, local_settings, run

MASTER = "sk-master"
SETTINGS = local_settings().front_door
LIMIT = SETTINGS.max_request_bytes
CHAT = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode()


class App:
    """Stands for LiteLLM: reads the whole body and answers `status` with `answer` (default: 200 and the body it
    read), with `headers`."""

    def __init__(self, status: int = 200, answer: list[bytes] | None = None, headers: list | None = None) -> None:
        self.called, self.read, self.scope = 0, b"", None
        self.status, self.answer, self.headers = status, answer, headers or []

    async def __call__(self, scope, receive, send) -> None:
        self.called, self.scope = self.called + 1, scope
        more = scope["type"] == "http"
        while more:
            message = await receive()
            self.read += message.get("body", b"")
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        parts = self.answer if self.answer is not None else [self.read]
        for i, part in enumerate(parts):
            await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})


@dataclasses.dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    app: App
    received: int
    """How many of the client's body messages the front door (or LiteLLM) asked for."""

    @property
    def message(self) -> str:
        return json.loads(self.body)["error"]["message"]


def call(path: str, token: str | None = "sk-tenant", body: bytes = b"", chunks: int = 1, declare_length: bool = True,
         method: str = "POST", query: bytes = b"", headers: list | None = None, app: App | None = None,
         settings=SETTINGS, content_type: bytes | None = b"application/json", scope_type: str = "http") -> Answer:
    app, sent = app or App(), []
    size = -(-len(body) // chunks) or 1
    parts = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    sent_headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    if declare_length and body:
        sent_headers.append((b"content-length", str(len(body)).encode()))
    if not declare_length:
        sent_headers.append((b"transfer-encoding", b"chunked"))
    if content_type and method == "POST":
        sent_headers.append((b"content-type", content_type))
    messages = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)]
    received = 0

    async def receive():
        nonlocal received
        received += 1
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    door = front_door.FrontDoor(app, settings, master_key=MASTER)
    run(door({"type": scope_type, "method": method, "path": path, "headers": [*sent_headers, *(headers or [])],
              "query_string": query}, receive, send))
    if scope_type == "websocket":
        return Answer(sent[0].get("code", 0), {}, b"", app, received)
    start = sent[0]
    answer_headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return Answer(start["status"], answer_headers, b"".join(m.get("body", b"") for m in sent[1:]), app, received)


# --- routes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_a_tenant_posts_chat_requests(path):
    answer = call(path, body=CHAT)
    assert (answer.status, answer.app.called) == (200, 1)


@pytest.mark.parametrize(("path", "query"), [("/v1/models", b""), ("/models", b""), ("/v1/models/tiny", b""),
                                             ("/models/acme-support", b""), ("/key/info", b""),
                                             ("/team/info", b"team_id=t-1"), ("/health/liveliness", b""),
                                             ("/health/readiness", b"")])
def test_a_tenant_reads_its_models_its_spend_and_the_probes(path, query):
    answer = call(path, method="GET", query=query)
    assert (answer.status, answer.app.called) == (200, 1)


@pytest.mark.parametrize("path", [
    "/routes", "/openapi.json", "/", "/ui", "/sso/key/generate", "/model/info", "/health", "/key/info/x",
    "/team/info/x", "/key/list", "/langfuse/x", "/register", "/health/readiness/x", "/v1/chat/completionsX",
    "/metrics/", "/models/tiny:generateContent", "/models/globex-legal:streamGenerateContent",
    "/v1beta/models/tiny:generateContent", "/engines/tiny/chat/completions", "/openai/deployments/tiny/completions",
    "/v1/models/tiny/x", "/v1/messages", "/anthropic/v1/messages", "/v1/responses", "/v1/embeddings", "/bedrock/x"])
def test_every_other_path_is_a_404_naming_the_tenant_routes_without_reaching_litellm(path):
    for token in ("sk-tenant", None, MASTER + "x"):
        for method in ("GET", "POST"):
            answer = call(path, token, method=method, body=CHAT if method == "POST" else b"")
            assert (answer.status, answer.app.called, answer.received) == (404, 0, 0), (path, token, method)
            assert answer.headers[errors.ERROR_HEADER.lower()] == "not_found_error"
            assert path in answer.message and "POST /chat/completions, /v1/chat/completions" in answer.message


@pytest.mark.parametrize(("method", "path", "allowed"), [("GET", "/v1/chat/completions", "POST"),
                                                          ("PUT", "/v1/completions", "POST"),
                                                          ("POST", "/v1/models", "GET"), ("DELETE", "/key/info", "GET"),
                                                          ("POST", "/health/readiness", "GET")])
def test_another_method_on_a_tenant_route_is_a_405_before_its_body_is_read(method, path, allowed):
    answer = call(path, method=method, body=CHAT)
    assert (answer.status, answer.headers["allow"], answer.app.called, answer.received) == (405, allowed, 0, 0)


def test_a_websocket_is_closed_for_a_tenant_and_passes_for_the_master_key():
    assert call("/v1/realtime", scope_type="websocket").status == 1008
    assert call("/v1/realtime", MASTER, scope_type="websocket").app.called == 1


def test_the_master_key_passes_to_every_path_method_and_size():
    for path in ("/routes", "/key/generate", "/metrics/"):
        assert call(path, MASTER, b"x" * (LIMIT + 1), query=b"model=x").status == 200


# --- what a request names outside its body -----------------------------------------------------------


@pytest.mark.parametrize(("path", "method", "query", "says"), [
    ("/v1/chat/completions", "POST", b"model=globex-legal", "query parameter 'model' is not accepted: name the model in"),
    ("/completions", "POST", b"api-version=1", "query parameter 'api-version' is not accepted"),
    ("/v1/models", "GET", b"team_id=x", "query parameter 'team_id' is not accepted: /v1/models takes none"),
    ("/team/info", "GET", b"", "/team/info needs ?team_id=<the key's team_id>"),
    ("/team/info", "GET", b"team_id=t&user_id=u", "query parameter 'user_id' is not accepted: /team/info takes team_id"),
])
def test_a_query_parameter_litellm_would_act_on_is_a_400(path, method, query, says):
    answer = call(path, method=method, query=query, body=CHAT if method == "POST" else b"")
    assert (answer.status, answer.app.called) == (400, 0) and says in answer.message


@pytest.mark.parametrize("query", [b"key=sk-other", b"a=1&key=sk-other", b"k%65y=sk-other", b"key="])
def test_another_keys_row_is_a_403_without_reaching_litellm(query):
    answer = call("/key/info", method="GET", query=query)
    assert (answer.status, answer.app.called) == (403, 0)
    assert answer.message == "/key/info reads the calling key's own row: leave out ?key="


@pytest.mark.parametrize("header", [b"x-litellm-num-retries", b"X-LiteLLM-Model", b"x-litellm-timeout",
                                    b"x-litellm-customer-id", b"x-api-key", b"api-key", b"x-goog-api-key"])
def test_litellms_routing_and_credential_headers_are_a_400(header):
    answer = call("/v1/chat/completions", body=CHAT, headers=[(header, b"3")])
    assert (answer.status, answer.app.called) == (400, 0)
    assert answer.message.startswith(f"header {header.decode().lower()}: not accepted by this gateway")


# --- bodies ------------------------------------------------------------------------------------------


def test_a_call_without_a_key_is_a_401_before_its_body_is_read():
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
        answer = call(path, None, b"x" * (10 * LIMIT), chunks=10, declare_length=False, method=method)
        assert (answer.status, answer.app.called, answer.received) == (401, 0, 0)


@pytest.mark.parametrize("declare_length", [True, False])
def test_a_get_with_a_body_is_a_400_before_the_body_is_read(declare_length):
    answer = call("/v1/models", body=b"x" * 1000, method="GET", declare_length=declare_length)
    assert (answer.status, answer.app.called, answer.received) == (400, 0, 0)


def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read():
    answer = call("/v1/chat/completions", body=b"{" + b"x" * LIMIT)
    assert (answer.status, answer.app.called, answer.received) == (413, 0, 0)
    assert f"larger than {LIMIT} bytes" in answer.message


def test_an_undeclared_body_is_refused_once_it_passes_the_limit():
    answer = call("/v1/chat/completions", body=b"{" + b"x" * LIMIT, chunks=4, declare_length=False)
    assert (answer.status, answer.app.called, answer.headers[errors.ERROR_HEADER.lower()]) == (
        413, 0, "request_too_large")


def test_a_body_at_the_limit_reaches_litellm_whole():
    padded = json.dumps({"model": "tiny", "prompt": ""}).encode()
    body = padded[:-2] + b"x" * (LIMIT - len(padded)) + b'"}'
    answer = call("/v1/completions", body=body, chunks=3, declare_length=False)
    assert (answer.status, len(body), json.loads(answer.app.read)) == (200, LIMIT, json.loads(body))


def test_a_body_that_does_not_arrive_in_time_is_a_408():
    slow = dataclasses.replace(SETTINGS, request_read_seconds=0.05)
    app, sent = App(), []

    async def receive():  # a client that sends its headers, then trickles nothing
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    door = front_door.FrontDoor(app, slow, master_key=MASTER)
    run(door({"type": "http", "method": "POST", "path": "/v1/chat/completions", "query_string": b"", "headers": [
        (b"authorization", b"Bearer sk-tenant"), (b"content-type", b"application/json")]}, receive, send))
    assert (sent[0]["status"], app.called) == (408, 0)
    assert b"did not arrive within 0.05 s" in sent[1]["body"]


def test_a_body_that_is_not_json_by_its_content_type_is_a_415():
    form = call("/v1/chat/completions", body=b"model=globex-legal", content_type=b"application/x-www-form-urlencoded")
    bare = call("/v1/chat/completions", body=CHAT, content_type=None)
    near = call("/v1/chat/completions", body=CHAT, content_type=b"application/jsonp")
    assert (form.status, bare.status, near.status, form.app.called + bare.app.called + near.app.called) == (
        415, 415, 415, 0)
    assert call("/v1/chat/completions", body=CHAT, content_type=b"Application/JSON; charset=utf-8").status == 200


def test_litellm_reads_the_object_checked_with_its_length_and_without_the_end_user():
    sent = b'{"model": "tiny",  "messages": [{"role": "user", "content": "h\\u00e9"}], "user": "u-1"}'
    answer = call("/v1/chat/completions", body=sent)
    checked = json.loads(answer.app.read)
    assert checked == {"model": "tiny", "messages": [{"role": "user", "content": "h\u00e9"}]}
    assert dict(answer.app.scope["headers"])[b"content-length"] == str(len(answer.app.read)).encode()


def test_a_refused_body_names_its_field_and_never_reaches_litellm():
    answer = call("/v1/chat/completions", body=json.dumps({"model": "tiny", "messages": [], "n": 8}).encode())
    assert (answer.status, answer.app.called) == (400, 0) and "messages must be a non-empty list" in answer.message


# --- answers -----------------------------------------------------------------------------------------

LITELLM_500 = json.dumps({"error": {"message": (
    "litellm.APIConnectionError: Hosted_vllmException - Cannot connect to host 127.0.0.1:19310 ssl:default\n\n"
    "LiteLLM: model group 'tiny' failed. Fallbacks={'globex-legal': ['micro']}"), "type": None, "code": "500"}}).encode()


def test_an_error_litellm_answers_reaches_the_tenant_in_tenantrys_words():
    app = App(500, [LITELLM_500[:40], LITELLM_500[40:]], [(b"content-type", b"application/json"),
                                                         (b"x-litellm-call-id", b"c-1"), (b"content-length", b"9")])
    answer = call("/v1/chat/completions", body=CHAT, app=app)
    assert answer.status == 500 and answer.headers[errors.ERROR_HEADER.lower()] == "engine_error"
    assert answer.headers["content-length"] == str(len(answer.body)) and "call id c-1" in answer.message
    assert not [leak for leak in ("127.0.0.1", "19310", "globex-legal", "micro", "Exception") if leak in answer.message]


def test_tenantrys_own_refusals_pass_as_they_are():
    own = json.dumps({"error": {"message": "engine tiny saturated", "type": "rate_limit_error"}}).encode()
    app = App(429, [own], [(errors.ERROR_HEADER.lower().encode(), b"rate_limit_error"), (b"retry-after", b"2")])
    answer = call("/v1/chat/completions", body=CHAT, app=app)
    assert (answer.status, answer.body, answer.headers["retry-after"]) == (429, own, "2")


def test_no_answer_names_the_engines_address_or_the_gateways_build():
    app = App(200, [b"{}"], [(b"x-litellm-model-api-base", b"http://127.0.0.1:19310/v1"),
                             (b"x-litellm-model-name", b"hosted_vllm/tiny"), (b"x-litellm-version", b"1.108.7"),
                             (b"x-litellm-model-id", b"tiny")])
    answer = call("/v1/chat/completions", body=CHAT, app=app)
    assert set(answer.headers) == {"x-litellm-model-id"}


def test_an_error_event_in_a_stream_is_put_in_tenantrys_words_and_the_rest_is_untouched():
    content = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
    error = b'data: {"error": {"message": "Hosted_vllmException - Cannot connect to host 127.0.0.1:19310", "code": "500"}}\n\n'
    app = App(200, [content, error], [(b"content-type", b"text/event-stream")])
    answer = call("/v1/chat/completions", body=CHAT, app=app)
    assert answer.body.startswith(content)
    event = json.loads(answer.body[len(content):].split(b"\n")[0][6:])["error"]
    assert event["type"] == "engine_error" and "127.0.0.1" not in event["message"]


def test_install_wraps_the_proxys_built_stack_once_and_nothing_outside_the_proxy(monkeypatch):
    class Starlette:  # what install touches of LiteLLM's FastAPI application
        middleware_stack = "built"

    proxy = type(sys)("litellm.proxy.proxy_server")
    proxy.app = Starlette()
    monkeypatch.setitem(sys.modules, "litellm.proxy.proxy_server", proxy)
    assert front_door.install(SETTINGS) is True and front_door.install(SETTINGS) is True
    assert isinstance(proxy.app.middleware_stack, front_door.FrontDoor) and proxy.app.middleware_stack.app == "built"
    monkeypatch.delitem(sys.modules, "litellm.proxy.proxy_server")
    assert front_door.install(SETTINGS) is False
