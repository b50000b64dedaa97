"""The gateway's front door: what reaches LiteLLM at all, before it reads a byte of the body.

LiteLLM answers hundreds of routes, and some without any key: its route table
(/routes, /openapi.json), the admin UI's login pages, OAuth registration,
telemetry sinks, and pass-through routes with their own authentication (one of
them, /langfuse/*, answers a tenant's key with a 500). Its key-level
`allowed_routes` closes every authenticated route but a tenant's (the
reconciler sets them), not these; its request size limit is an Enterprise
feature. So the plugin wraps LiteLLM's application as it loads, outermost:

- a caller without the master key reaches the tenant routes (and the paths
  below them), the spend view (its own key and team, exactly; `?key=` on it
  is a 403) and the open routes (the health probes, exactly); any other path
  is a 404 that says which routes there are;
- a body larger than the Plan's limit is a 413 that names the limit: refused
  on its Content-Length before it is read, or as soon as the bytes read pass
  it, so a multi-megabyte prompt costs the gateway neither memory nor the time
  to parse and count it; a body that is not a JSON object is a 400 (LiteLLM
  answers a JSON array with a 500) (docs/decisions.md: The gateway's front door);
- chat messages and completion prompts of the wrong shape are a 400 naming the
  field (LiteLLM 1.108.7 answers a number as content, or token ids as a prompt,
  with a 500 after calling the engine and its fallback: request_problem).

The master key (operators, the reconciler, Prometheus) passes untouched.
"""

import hmac
import json
import os
from typing import Any
from urllib.parse import unquote_plus

from tenant_policy_settings import FrontDoorSettings

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"


def _error(status: int, message: str, kind: str) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]]:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": str(status)}}).encode()
    return body, [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]


class FrontDoor:
    """ASGI middleware around LiteLLM's application."""

    def __init__(self, app: Any, settings: FrontDoorSettings, master_key: str | None = None) -> None:
        self.app, self.settings = app, settings
        self.master_key = master_key if master_key is not None else os.environ.get(MASTER_KEY_ENV, "")

    def allowed(self, path: str) -> bool:
        return path in self.settings.open_routes or path in self.settings.spend_view_routes or any(
            path == route or path.startswith(route + "/") for route in self.settings.tenant_routes)

    def is_operator(self, headers: list[tuple[bytes, bytes]]) -> bool:
        given = next((v for k, v in headers if k.lower() == b"authorization"), b"").decode("latin-1")
        scheme, _, token = given.partition(" ")
        return bool(self.master_key) and scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.master_key.encode())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.is_operator(scope.get("headers", [])):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if not self.allowed(path):
            routes = ", ".join((*self.settings.tenant_routes, *self.settings.spend_view_routes))
            await _respond(send, 404, f"no route {path} here: a tenant's key calls {routes}", "not_found_error")
            return
        if path in self.settings.spend_view_routes and _names_a_key(scope):
            await _respond(send, 403, f"{path} reads the calling key's own row: leave out ?key=", "permission_denied")
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.settings.max_request_bytes
        body = await _read_body(scope, receive, limit)
        if body is None:
            await _respond(send, 413, f"request body larger than {limit} bytes, this gateway's limit for the longest "
                                      "context it serves", "request_too_large")
        elif body.strip() and not body.lstrip().startswith(b"{"):
            # LiteLLM 1.108.7 answers a JSON array or scalar with a 500 from its key check.
            await _respond(send, 400, "the request body must be a JSON object", "invalid_request_error")
        elif problem := request_problem(path, body):
            await _respond(send, 400, problem, "invalid_request_error")
        else:
            await self.app(scope, _replay(body, receive), send)


def _names_a_key(scope: dict[str, Any]) -> bool:
    """A `key` query parameter: LiteLLM's /key/info answers any key's row to whoever holds that key."""
    query = scope.get("query_string", b"").decode("latin-1")
    return any(unquote_plus(part.partition("=")[0]) == "key" for part in query.split("&") if part)


def prompt_tokens(data: dict[str, Any]) -> int:
    """About how many tokens a chat or completion request's prompt has (LiteLLM's counter for its model)."""
    import litellm

    try:
        if "messages" in data:
            return int(litellm.token_counter(model=data.get("model", ""), messages=data["messages"]))
        prompt = data.get("prompt", "")
        text = prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt)
        return int(litellm.token_counter(model=data.get("model", ""), text=text))
    except Exception:  # noqa: BLE001 - an estimate; never fail a request over counting
        return len(json.dumps(data.get("messages") or data.get("prompt") or "")) // 4


ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def request_problem(path: str, body: bytes) -> str | None:
    """What is wrong with the shape of a chat request's messages or a completion's prompt, naming
    the field; None when nothing is (malformed JSON and missing fields are LiteLLM's own 400s)."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if path.endswith("/chat/completions") and request.get("messages") is not None:
        return _messages_problem(request["messages"])
    prompt = request.get("prompt", "")
    text = isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt))
    if path.endswith("/completions") and not path.endswith("/chat/completions") and not text:
        return "prompt must be a string or a non-empty list of strings (this gateway takes no token ids)"
    return None


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list of message objects"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages[{i}] must be an object with a role and content"
        if message.get("role") not in ROLES:
            return f"messages[{i}].role must be one of {', '.join(ROLES)}"
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            return f"messages[{i}].content must be a string or a list of content parts"
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                return f"messages[{i}].content[{j}] must be an object with a type"
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                return f"messages[{i}].content[{j}].text must be a string"
    return None


async def _read_body(scope: dict[str, Any], receive: Any, limit: int) -> bytes | None:
    """The whole body, or None once it is larger than `limit`: refused on its Content-Length
    before a byte is read, or as the bytes read pass it (a chunked body declares no length)."""
    declared = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-length"), None)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    parts, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            break
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > limit:
            return None
        more = message.get("more_body", False)
    return b"".join(parts)


def _replay(body: bytes, receive: Any) -> Any:
    """The body read here, once, then the client's own messages (LiteLLM listens for a disconnect
    while it streams)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _respond(send: Any, status: int, message: str, kind: str) -> None:
    body, headers = _error(status, message, kind)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def install(settings: FrontDoorSettings) -> bool:
    """Wrap the running LiteLLM proxy's application; False when there is none (the plugin imported
    outside the proxy, as the unit tests do). The plugin loads during the proxy's start-up, after
    Starlette has built the middleware stack, so the built stack is wrapped."""
    import sys

    proxy = sys.modules.get("litellm.proxy.proxy_server")
    app = getattr(proxy, "app", None)
    if app is None:
        return False
    if isinstance(app.middleware_stack, FrontDoor) or getattr(app, "_tenantry_front_door", False):
        return True
    if app.middleware_stack is None:
        app.middleware_stack = app.build_middleware_stack()
    app.middleware_stack = FrontDoor(app.middleware_stack, settings)
    app._tenantry_front_door = True
    return True
