"""The gateway's front door (tenant_policy_front_door) as plain ASGI: which paths a caller
without the master key reaches, and bodies refused before they are read or as they pass the
limit. Live, against LiteLLM: tests/local/test_hostile_tenant.py."""

from __future__ import annotations

import json
import sys

import pytest

from tests.unit.policy_plugin import front_door, local_settings, run

MASTER = "sk-master"
LIMIT = local_settings().front_door.max_request_bytes


class App:
    """Stands for LiteLLM: reads the whole body, answers 200 with its length."""

    def __init__(self) -> None:
        self.called = 0

    async def __call__(self, scope, receive, send) -> None:
        self.called += 1
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(size).encode()})


def call(path: str, token: str | None = None, body: bytes = b"", chunks: int = 1,
         declare_length: bool = True, method: str = "POST", query: bytes = b"") -> tuple[int, bytes, App]:
    app, sent, parts = App(), [], [body[i::chunks] for i in range(chunks)] if chunks > 1 else [body]
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    if declare_length:
        headers.append((b"content-length", str(len(body)).encode()))
    messages = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    door = front_door.FrontDoor(app, local_settings().front_door, master_key=MASTER)
    run(door({"type": "http", "method": method, "path": path, "headers": headers, "query_string": query}, receive,
             send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), app


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions", "/v1/completions", "/v1/models",
                                  "/v1/models/tiny", "/health/liveliness", "/health/readiness"])
def test_a_tenant_reaches_the_inference_api_and_the_probes(path):
    status, body, app = call(path, "sk-tenant", b"{}")
    assert (status, body, app.called) == (200, b"2", 1)


@pytest.mark.parametrize("path", ["/routes", "/openapi.json", "/", "/ui", "/sso/key/generate", "/model/info",
                                  "/health", "/key/info/x", "/team/info/x", "/key/list", "/langfuse/x", "/register",
                                  "/health/readiness/x", "/v1/chat/completionsX", "/metrics/"])
def test_every_other_path_is_a_404_naming_the_tenant_routes_without_reaching_litellm(path):
    for token in ("sk-tenant", None, MASTER + "x"):
        status, body, app = call(path, token)
        assert status == 404 and app.called == 0
        error = json.loads(body)["error"]
        assert error["type"] == "not_found_error" and path in error["message"] and "/v1/chat/completions" in error["message"]


@pytest.mark.parametrize("path", ["/key/info", "/team/info"])
def test_the_spend_view_reaches_litellm_on_its_exact_paths(path):
    status, body, app = call(path, "sk-tenant", method="GET", query=b"team_id=t-1" if path == "/team/info" else b"")
    assert (status, app.called) == (200, 1)


@pytest.mark.parametrize("query", [b"key=sk-other", b"a=1&key=sk-other", b"k%65y=sk-other", b"key="])
def test_another_keys_row_is_a_403_without_reaching_litellm(query):
    status, body, app = call("/key/info", "sk-tenant", method="GET", query=query)
    assert (status, app.called) == (403, 0)
    assert json.loads(body)["error"]["message"] == "/key/info reads the calling key's own row: leave out ?key="


def test_the_master_key_passes_to_every_path_and_every_size():
    for path in ("/routes", "/key/generate", "/metrics/"):
        assert call(path, MASTER, b"x" * (LIMIT + 1))[0] == 200


def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read():
    status, body, app = call("/v1/chat/completions", "sk-tenant", b"{" + b"x" * LIMIT)
    assert status == 413 and app.called == 0
    assert f"larger than {LIMIT} bytes" in json.loads(body)["error"]["message"]


def test_an_undeclared_body_is_refused_once_it_passes_the_limit():
    status, body, app = call("/v1/chat/completions", "sk-tenant", b"{" + b"x" * LIMIT, chunks=4, declare_length=False)
    assert status == 413 and app.called == 0 and b"request_too_large" in body


def test_a_body_at_the_limit_reaches_litellm_whole():
    status, body, _ = call("/v1/completions", "sk-tenant", b"{" + b"x" * (LIMIT - 1), chunks=3, declare_length=False)
    assert (status, body) == (200, str(LIMIT).encode())


def test_install_wraps_the_proxys_built_stack_once_and_nothing_outside_the_proxy(monkeypatch):
    class Starlette:  # what install touches of LiteLLM's FastAPI application
        middleware_stack = "built"

    proxy = type(sys)("litellm.proxy.proxy_server")
    proxy.app = Starlette()
    monkeypatch.setitem(sys.modules, "litellm.proxy.proxy_server", proxy)
    settings = local_settings().front_door
    assert front_door.install(settings) is True and front_door.install(settings) is True
    assert isinstance(proxy.app.middleware_stack, front_door.FrontDoor) and proxy.app.middleware_stack.app == "built"
    monkeypatch.delitem(sys.modules, "litellm.proxy.proxy_server")
    assert front_door.install(settings) is False


@pytest.mark.parametrize("body", [b"[]", b" 42", b'"hello"', b"null"])
def test_a_body_that_is_not_a_json_object_is_a_400(body):
    status, answer, app = call("/v1/chat/completions", "sk-tenant", body)
    assert status == 400 and app.called == 0 and b"must be a JSON object" in answer


def test_reads_pass_through_unbuffered():
    status, body, app = call("/v1/models", "sk-tenant", b"x" * (LIMIT + 1), declare_length=False, method="GET")
    assert (status, body, app.called) == (200, str(LIMIT + 1).encode(), 1)  # a GET's body is LiteLLM's to ignore


def _chat(messages) -> bytes:
    return json.dumps({"model": "tiny", "messages": messages}).encode()


@pytest.mark.parametrize(("body", "says"), [
    (_chat("hello"), "messages must be a non-empty list"),
    (_chat([]), "messages must be a non-empty list"),
    (_chat([None]), "messages[0] must be an object"),
    (_chat([{"role": "user", "content": "hi"}, {"role": 1, "content": "hi"}]), "messages[1].role must be one of"),
    (_chat([{"role": "user", "content": 5}]), "messages[0].content must be a string or a list"),
    (_chat([{"role": "user", "content": [{"text": "hi"}]}]), "messages[0].content[0] must be an object with a type"),
    (_chat([{"role": "user", "content": [{"type": "text", "text": 5}]}]), "messages[0].content[0].text must be a str"),
])
def test_chat_messages_of_the_wrong_shape_are_a_400_naming_the_field(body, says):
    status, answer, app = call("/v1/chat/completions", "sk-tenant", body)
    assert (status, app.called) == (400, 0), answer
    assert says in json.loads(answer)["error"]["message"]


@pytest.mark.parametrize("prompt", [5, None, [], [1, 2, 3], [[1, 2]], ["a", 1]])
def test_a_completion_prompt_that_is_not_text_is_a_400(prompt):
    status, answer, app = call("/v1/completions", "sk-tenant", json.dumps({"model": "tiny", "prompt": prompt}).encode())
    assert (status, app.called) == (400, 0) and b"prompt must be a string or a non-empty list of strings" in answer


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", _chat([{"role": "system", "content": None}, {"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:,"}}]}])),
    ("/v1/chat/completions", b'{"model": "tiny"}'),  # no messages: LiteLLM's own 400 names it
    ("/v1/chat/completions", b'{"model": "tiny", "messages": [}'),  # malformed: LiteLLM's own 400
    ("/v1/completions", b'{"model": "tiny", "prompt": ["a", "b"]}'),
    ("/v1/completions", b'{"model": "tiny"}'),
])
def test_well_formed_requests_and_what_litellm_already_answers_pass(path, body):
    status, _, app = call(path, "sk-tenant", body)
    assert (status, app.called) == (200, 1)
