"""The gateway's front door: what reaches LiteLLM at all, and what a tenant reads back.

LiteLLM answers hundreds of routes (some without any key: its route table, the admin UI's login pages,
OAuth registration, pass-through routes, Google- and Anthropic-shaped inference routes, WebSockets) and
routes a request on more than its body's model (the query string, the path, headers such as
x-litellm-model, fields such as api_base). Its key-level `allowed_routes` matches route prefixes, and its
request size limit is an Enterprise feature. So the plugin wraps LiteLLM's application as it loads,
outermost, and for every caller without the master key:

- only these (method, route) pairs exist: POST to the chat and text completion routes, GET of the model
  list and of one model by name, GET of the spend view's two routes and of the health probes; any other
  path is a 404 that names them, another method a 405, a WebSocket is closed (403);
- a request names no model, target or retry policy outside its body: query parameters are refused (the
  spend view's team_id aside), so are LiteLLM's x-litellm-* headers and its other credential headers;
- a call without a key is a 401 before its body is read; a body is read only up to the Plan's size limit
  (413) and within its read time (408), and a GET carries none; an inference body is held to
  tenant_policy_request's allow-list and LiteLLM reads the object checked there;
- every error LiteLLM answers is passed on in tenantry's words (tenant_policy_errors), and no answer
  carries the engine's address.

The master key (operators, the reconciler, Prometheus) passes untouched.
"""

# No `from __future__ import annotations`: loaded by path beside the plugin.
import asyncio
import hmac
import json
import os
import re
from typing import Any
from urllib.parse import parse_qsl

from tenant_policy_errors import ERROR_HEADER, body as error_body, stream_chunk, tenant_error
from tenant_policy_request import Refused, checked_body
from tenant_policy_settings import FrontDoorSettings

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
MODEL_IN_PATH = re.compile(r"[A-Za-z0-9._-]{1,100}")
REFUSED_HEADER_PREFIXES = ("x-litellm-",)
REFUSED_HEADERS = frozenset({"api-key", "x-api-key", "x-goog-api-key", "ocp-apim-subscription-key",
                             "litellm_user_api_key"})
"""Credentials and routing LiteLLM reads from headers: a tenant sends its key as Authorization only."""
LEAKY_HEADERS = frozenset({b"x-litellm-model-api-base", b"x-litellm-model-name", b"x-litellm-version"})
"""Response headers that name the engine's address, its provider route or the gateway's build."""


class FrontDoor:
    """ASGI middleware around LiteLLM's application."""

    def __init__(self, app: Any, settings: FrontDoorSettings, master_key: str | None = None) -> None:
        self.app, self.settings = app, settings
        self.master_key = master_key if master_key is not None else os.environ.get(MASTER_KEY_ENV, "")
        self.routes: dict[str, str] = {
            **{p: "chat" for p in settings.chat_routes}, **{p: "completion" for p in settings.completion_routes},
            **{p: "models" for p in settings.model_list_routes}, **{p: "probe" for p in settings.open_routes},
            **{p: "spend" for p in settings.spend_view_routes}}

    def route(self, path: str) -> str | None:
        """The kind of a path a tenant may call: chat, completion, models, model, spend, probe; None."""
        if path in self.routes:
            return self.routes[path]
        parent, _, name = path.rpartition("/")
        return "model" if parent in self.settings.model_list_routes and MODEL_IN_PATH.fullmatch(name) else None

    def is_operator(self, headers: list[tuple[bytes, bytes]]) -> bool:
        token = _bearer(headers)
        return bool(self.master_key) and token is not None and hmac.compare_digest(
            token.encode(), self.master_key.encode())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or self.is_operator(scope.get("headers", [])):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "no WebSocket routes for a tenant's key"})
        else:
            try:
                await self.tenant_request(scope, receive, send)
            except Refused as refused:
                await respond(send, refused)

    async def tenant_request(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, method, headers = scope.get("path", ""), scope.get("method", ""), scope.get("headers", [])
        kind = self.route(path)
        if kind is None:
            raise Refused(404, f"no route {path} here: a tenant's key calls {self.described()}")
        expected = "POST" if kind in ("chat", "completion") else "GET"
        if method != expected:
            raise Refused(405, f"{path} answers {expected} only, not {method}", allow=expected)
        self.check_query(kind, path, scope.get("query_string", b""))
        if kind != "probe":
            _check_headers(headers)
            if _bearer(headers) is None:
                raise Refused(401, "no key: send the tenant's key as Authorization: Bearer <key>")
        if method == "GET":
            if _has_body(headers):
                raise Refused(400, f"GET {path} takes no body")
            model = path.rpartition("/")[2] if kind == "model" else None
            await self.app(scope, receive, Replies(send, kind, model))
            return
        if _content_type(headers) != "application/json":
            raise Refused(415, "send the request as Content-Type: application/json")
        checked, model = checked_body(kind, await self.read_body(headers, receive))
        scope = {**scope, "headers": _with_length(headers, len(checked))}
        await self.app(scope, _replay(checked, receive), Replies(send, kind, model))

    def check_query(self, kind: str, path: str, query: bytes) -> None:
        """Only the spend view's own parameters: LiteLLM routes on ?model= and answers ?team_id= on routes
        that should take none."""
        allowed = self.settings.spend_view_routes.get(path, ()) if kind == "spend" else ()
        given = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        if kind == "spend" and "key" in {name for name, _ in given}:
            raise Refused(403, f"{path} reads the calling key's own row: leave out ?key=")
        for name, _ in given:
            if name not in allowed:
                where = "name the model in the body" if name == "model" else f"{path} takes {', '.join(allowed) or 'none'}"
                raise Refused(400, f"query parameter {name!r} is not accepted: {where}", name)
        for name in set(allowed) - {name for name, _ in given}:
            raise Refused(400, f"{path} needs ?{name}=<the key's {name}> (GET /key/info shows it)", name)

    def described(self) -> str:
        posts = [*self.settings.chat_routes, *self.settings.completion_routes]
        gets = [*self.settings.model_list_routes, *(f"{p}/<model>" for p in self.settings.model_list_routes),
                *self.settings.spend_view_routes]
        return f"POST {', '.join(posts)}; GET {', '.join(gets)}"

    async def read_body(self, headers: list[tuple[bytes, bytes]], receive: Any) -> bytes:
        """The whole body, refused on its Content-Length before a byte is read when that is over the limit,
        as the bytes read pass it (a chunked body declares no length), or when it has not all arrived
        within the read time (a client that trickles it holds nothing longer)."""
        limit, seconds = self.settings.max_request_bytes, self.settings.request_read_seconds
        too_large = Refused(413, f"request body larger than {limit} bytes, this gateway's limit for the longest "
                                 "context it serves")
        declared = _header(headers, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        try:
            return await asyncio.wait_for(_receive_all(receive, limit, too_large), seconds)
        except asyncio.TimeoutError:
            raise Refused(408, f"the request body did not arrive within {seconds:g} s") from None


_KINDS = {401: "authentication_error", 403: "permission_denied", 404: "not_found_error", 405: "method_not_allowed",
          408: "timeout_error", 413: "request_too_large", 415: "invalid_request_error"}


async def _receive_all(receive: Any, limit: int, too_large: Refused) -> bytes:
    parts, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            break
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > limit:
            raise too_large
        more = message.get("more_body", False)
    return b"".join(parts)


class Replies:
    """LiteLLM's answer on its way to a tenant: the engine's address and build taken out of its headers, an
    error that is not tenantry's own put in tenantry's words, and so is each error event of a stream."""

    def __init__(self, send: Any, route: str, model: str | None) -> None:
        self.send, self.route, self.model = send, route, model
        self.start: dict[str, Any] | None = None
        self.translating, self.held, self.call_id = False, [], None

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in LEAKY_HEADERS]
            names = {k.lower() for k, _ in headers}
            self.call_id = _header(headers, b"x-litellm-call-id")
            self.translating = message["status"] >= 400 and ERROR_HEADER.lower().encode() not in names
            self.start = {**message, "headers": headers}
            if not self.translating:
                await self.send(self.start)
            return
        if message["type"] != "http.response.body":
            await self.send(message)
        elif self.translating:
            self.held.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._send_translated()
        else:
            chunk = message.get("body", b"")
            await self.send({**message, "body": stream_chunk(chunk, model=self.model, call_id=self.call_id)})

    async def _send_translated(self) -> None:
        status, kind, text = tenant_error(self.start["status"], b"".join(self.held), route=self.route,
                                          model=self.model, call_id=self.call_id)
        answer = error_body(status, kind, text)
        kept = [(k, v) for k, v in self.start["headers"] if k.lower() not in (b"content-length", b"content-type")]
        await self.send({**self.start, "status": status, "headers": [
            *kept, (b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode()),
            (ERROR_HEADER.encode(), kind.encode())]})
        await self.send({"type": "http.response.body", "body": answer})


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in headers if k.lower() == name), None)


def _bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    scheme, _, token = (_header(headers, b"authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _content_type(headers: list[tuple[bytes, bytes]]) -> str:
    """The media type, without its parameters (a charset)."""
    return (_header(headers, b"content-type") or "").split(";", 1)[0].strip().lower()


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    length = _header(headers, b"content-length")
    return (length is not None and length.strip() != "0") or _header(headers, b"transfer-encoding") is not None


def _check_headers(headers: list[tuple[bytes, bytes]]) -> None:
    for name, _ in headers:
        lowered = name.decode("latin-1").lower()
        if lowered in REFUSED_HEADERS or lowered.startswith(REFUSED_HEADER_PREFIXES):
            raise Refused(400, f"header {lowered}: not accepted by this gateway (a tenant's request is described "
                               "by its body alone; its key goes in Authorization)", lowered)


def _with_length(headers: list[tuple[bytes, bytes]], length: int) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"transfer-encoding")]
    return [*kept, (b"content-length", str(length).encode())]


def _replay(body: bytes, receive: Any) -> Any:
    """The body checked here, once, then the client's own messages (LiteLLM listens for a disconnect
    while it streams)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def respond(send: Any, refused: Refused) -> None:
    kind = _KINDS.get(refused.status, "invalid_request_error")
    answer = error_body(refused.status, kind, refused.message, refused.param)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode()),
               (ERROR_HEADER.encode(), kind.encode())]
    if refused.allow:
        headers.append((b"allow", refused.allow.encode()))
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


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
