"""What a tenant reads when its request is refused or fails: tenantry's own words, never LiteLLM's.

LiteLLM's error texts hand out the platform's map and its internals: a failed call lists the whole fallback
table (every tenant's adapter names), connection errors carry the engine's address, a wrong type carries a
Python TypeError. The front door passes a tenant every error it gets in tenantry's words instead, keeping
what the tenant needs (the model it asked, its own limit, the engine's reason for refusing the request)
and the status. An error that carries ERROR_HEADER is tenantry's already (the plugin and the front door
set it where they refuse) and passes as it is.
"""

# No `from __future__ import annotations`: loaded by path beside the plugin.
import ast
import json
import re
from typing import Any

ERROR_HEADER = "X-Tenantry-Error"
"""On every error answer a tenant receives: its kind (rate_limit_error, permission_denied, ...)."""

ENGINE_MESSAGE_CHARACTERS = 300

_ADDRESS = re.compile(r"[a-z][a-z0-9+.-]*://\S+|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\b[\w.-]+:\d{2,5}\b", re.I)
_PATH = re.compile(r"(?<![\w.])/(?:[\w.-]+/)+[\w.-]*")
_PROVIDER_ERROR = re.compile(r"\w+Exception - ")
_STATUS_PREFIX = re.compile(r"^Error code: \d+ - ")
_LIMIT = re.compile(r"Limit type: (\w+)\. Current limit: (\d+).*?Limit resets at: ([^\"']+?)(?:$|\")", re.S)
_BUDGET = re.compile(r"Current cost: ([0-9.e+-]+), Max budget: ([0-9.e+-]+)")


def body(status: int, kind: str, message: str, param: str | None = None) -> bytes:
    """OpenAI's error shape, which every client library reads."""
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": str(status)}}).encode()


def litellm_message(raw: bytes) -> tuple[str, str]:
    """(type, message) of an error LiteLLM answered, whatever shape it took (OpenAI's, FastAPI's detail,
    plain text)."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return "", raw.decode("utf-8", "replace")
    error = answer.get("error", answer.get("detail")) if isinstance(answer, dict) else answer
    if isinstance(error, dict):
        message = error.get("message", error.get("error", ""))
        return str(error.get("type") or ""), message if isinstance(message, str) else json.dumps(message)
    return "", str(error)


def engine_reason(message: str) -> str | None:
    """The engine's own message in a LiteLLM error ("Hosted_vllmException - {"error": {"message": ...}}", or
    "OpenAIException - Error code: 400 - {'error': {...}}"), addresses and paths removed; None when the error
    did not come from the engine."""
    found = _PROVIDER_ERROR.search(message)
    if found is None:
        return None
    rest = _STATUS_PREFIX.sub("", message[found.end():], count=1)
    text = _inner_message(rest) or rest.split("\n", 1)[0]
    return redacted(text)


def _inner_message(text: str) -> str | None:
    """error.message of the JSON object (or Python dict, as the OpenAI client prints one) `text` starts with."""
    if not text.startswith("{"):
        return None
    try:
        inner, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        try:
            inner = ast.literal_eval(text.split("\n", 1)[0])
        except (ValueError, SyntaxError):
            return None
    error = inner.get("error") if isinstance(inner, dict) else None
    found = error.get("message") if isinstance(error, dict) else None
    return found if isinstance(found, str) else None


def redacted(text: str) -> str:
    text = _PATH.sub("<path>", _ADDRESS.sub("<address>", text)).strip()
    return text if len(text) <= ENGINE_MESSAGE_CHARACTERS else text[:ENGINE_MESSAGE_CHARACTERS] + "..."


def tenant_error(status: int, raw: bytes, *, route: str, model: str | None, call_id: str | None) -> tuple[int, str, str]:
    """(status, kind, message) a tenant receives for an error LiteLLM answered with `status` and `raw`."""
    kind, message = litellm_message(raw)
    lowered = message.lower()
    if status == 401:
        if "blocked" in lowered:
            return 401, "authentication_error", "this key is blocked: its tenant was removed or the key was replaced"
        if "expired" in lowered:
            return 401, "authentication_error", "this key has expired"
        return 401, "authentication_error", "this key is not valid here: send the tenant's key as Authorization: Bearer <key>"
    if kind == "no_db_connection":  # LiteLLM could not reach PostgreSQL to check a key its cache no longer holds
        return 503, "service_unavailable", ("the gateway cannot check this key now: its database is unreachable "
                                            "(keys used within the last minute keep working); retry in a minute")
    if "budget" in kind or "budget has been exceeded" in lowered:
        return status, "budget_exceeded", _budget(message)
    if status == 429:
        return 429, "rate_limit_error", _rate_limit(message)
    if route == "probe":
        return status, "unavailable", "the gateway is not ready"
    if route == "spend" and status in (403, 404):
        return 403, "permission_denied", "a key reads its own key and team only: pass the team_id GET /key/info shows"
    if (status == 403 and ("model" in kind or "not available for this api key" in lowered)) or (
            route == "model" and status == 404):
        return status, "permission_denied" if status == 403 else "not_found_error", _not_available(model)
    return _failure(status, message, call_id)


def _failure(status: int, message: str, call_id: str | None) -> tuple[int, str, str]:
    reason = engine_reason(message)
    if 400 <= status < 500 and status != 408 and reason:
        return status, "invalid_request_error", f"the engine refused the request: {reason}"
    reference = f" (call id {call_id})" if call_id else ""
    if status == 408 or "timeout" in message.lower():
        return status, "timeout_error", f"the engine did not answer in time{reference}; retry"
    if status >= 500:
        return status, "engine_error", (f"the request could not be served: an engine failed or could not be reached"
                                        f"{reference}; retry, and report the call id if it persists")
    return status, "invalid_request_error", f"the gateway refused the request ({status}){reference}"


def _not_available(model: str | None) -> str:
    named = f"model {model!r}" if model else "the model"
    return f"{named} is not available for this API key; GET /v1/models lists the models it may call"


def _rate_limit(message: str) -> str:
    found = _LIMIT.search(message)
    if not found:
        return "the tenant is over its rate limit; retry after the seconds Retry-After gives"
    unit, limit, resets = found.groups()
    return f"the tenant is over its limit of {limit} {unit} a minute; the window ends at {resets.strip()}"


def _budget(message: str) -> str:
    found = _BUDGET.search(message)
    spent = f": {float(found[1]):.6g} USD of {float(found[2]):.6g} USD" if found else ""
    return f"the tenant's budget for this window is spent{spent}"


def stream_chunk(chunk: bytes, *, model: str | None, call_id: str | None) -> bytes:
    """A piece of an event stream with each error event in tenantry's words; other events as they were."""
    if b'"error"' not in chunk:
        return chunk
    lines = chunk.split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(b"data: {") and b'"error"' in line:
            lines[i] = b"data: " + _stream_error(line[6:], model, call_id)
    return b"\n".join(lines)


def _stream_error(event: bytes, model: str | None, call_id: str | None) -> bytes:
    try:
        error: Any = json.loads(event).get("error")
    except (ValueError, AttributeError):
        return event
    if not isinstance(error, dict):
        return event
    code = str(error.get("code") or "")
    status = int(code) if code.isdigit() else 500
    status, kind, message = tenant_error(status, json.dumps({"error": error}).encode(), route="inference",
                                         model=model, call_id=call_id)
    return body(status, kind, message)
