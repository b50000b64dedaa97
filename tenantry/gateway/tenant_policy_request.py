"""What a tenant's inference request may carry, checked on its raw body before LiteLLM reads a byte of it.

LiteLLM reads far more of a request than OpenAI's API defines, and acts on it: `api_base`, `api_key`,
`base_url` and `custom_llm_provider` send the call elsewhere, `user_config` builds a router of the
client's choosing, `fallbacks` and a comma list of models reach other deployments, `timeout` and
`num_retries` keep one admission retrying, `extra_body` overrides any field the plugin capped, and
`metadata` reaches the plugin's own bookkeeping. So a tenant's body is held to an allow-list per route:
OpenAI's fields of chat and text completions and the vLLM sampling fields the engines serve, each of its
type; anything else is a 400 naming the field (docs/security.md lists them). What LiteLLM then reads is
the object checked here, written out again: a second parser never sees bytes this one did not
(duplicate keys, NaN, infinities, integers beyond 64 bits, lone surrogates and nesting deeper than
MAX_DEPTH are refused, not reinterpreted).

`user` (and OpenAI's newer `safety_identifier`) is accepted and dropped: LiteLLM made a global end-user
row of every distinct value, and the platform keeps no per-end-user records.
"""

# No `from __future__ import annotations`: loaded by path beside the plugin (docs/decisions.md: The
# plugin's modules load as neighbours).
import json
import math
from collections.abc import Callable
from typing import Any

import orjson

MAX_DEPTH = 32
"""Deepest nesting of objects and lists a body may have (a tool's parameter schema is the deepest thing a
request carries); 5,000 levels made LiteLLM answer with a plain-text 500."""
MAX_INTEGER = 2**53
"""Integers beyond this are not exact in JSON's numbers; no field needs one."""

ROLES = ("system", "developer", "user", "assistant", "tool")
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
DROPPED = ("user", "safety_identifier")
"""Accepted for OpenAI clients' sake and removed: the gateway keeps no end-user records."""


class Refused(ValueError):
    """A request the gateway does not pass on: its status and the message the tenant reads."""

    def __init__(self, status: int, message: str, param: str | None = None, allow: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.allow = allow
        """The methods the route answers, on a 405."""


Check = Callable[[Any, str], str | None]
"""A field's value and its path -> what is wrong with it, or None."""


def integer(minimum: int | None = None, maximum: int | None = None) -> Check:
    def check(value: Any, path: str) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_INTEGER:
            return f"{path} must be an integer"
        if minimum is not None and value < minimum:
            return f"{path} must be at least {minimum}, got {value}"
        if maximum is not None and value > maximum:
            return f"{path} must be at most {maximum}, got {value}"
        return None
    return check


def number(value: Any, path: str) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_INTEGER
    return None if ok else f"{path} must be a number"


def boolean(value: Any, path: str) -> str | None:
    return None if isinstance(value, bool) else f"{path} must be true or false"


def string(value: Any, path: str) -> str | None:
    return None if isinstance(value, str) else f"{path} must be a string"


def strings(value: Any, path: str) -> str | None:
    ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    return None if ok else f"{path} must be a string or a list of strings"


def an_object(value: Any, path: str) -> str | None:
    return None if isinstance(value, dict) else f"{path} must be an object"


def one_choice(value: Any, path: str) -> str | None:
    if value == 1 and not isinstance(value, bool):
        return None
    return (f"{path} must be 1: one choice per request (n choices would run n sequences on the engine under "
            "one admission); send n requests")


def model_name(value: Any, path: str) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{path} must name one model"
    if "," in value:
        return f"{path} must name one model, not a comma list ({value!r}): send one request per model"
    return None


def stream_options(value: Any, path: str) -> str | None:
    if not isinstance(value, dict) or set(value) - {"include_usage"}:
        return f"{path} must be an object with at most include_usage"
    return boolean(value["include_usage"], f"{path}.include_usage") if "include_usage" in value else None


def logit_bias(value: Any, path: str) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              for v in value.values()):
        return f"{path} must be an object of token ids to numbers"
    return None


def tools(value: Any, path: str) -> str | None:
    if not isinstance(value, list):
        return f"{path} must be a list of tools"
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            return f"{path}[{i}] must be an object with type \"function\" and a function"
        if not isinstance(function.get("name"), str):
            return f"{path}[{i}].function.name must be a string"
    return None


def tool_choice(value: Any, path: str) -> str | None:
    return None if isinstance(value, (str, dict)) else f"{path} must be a string or an object"


def prompt(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return None
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return None
    if isinstance(value, list) and len(value) > 1 and all(isinstance(v, str) for v in value):
        return (f"{path} must be one prompt: a list of {len(value)} would run {len(value)} sequences on the engine "
                "under one admission; send one request per prompt")
    return f"{path} must be a string (or a list of one string); this gateway takes no token ids"


def messages(value: Any, path: str) -> str | None:
    if not isinstance(value, list) or not value:
        return f"{path} must be a non-empty list of message objects"
    for i, message in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(message, dict):
            return f"{where} must be an object with a role and content"
        if message.get("role") not in ROLES:
            return f"{where}.role must be one of {', '.join(ROLES)}"
        if unknown := sorted(set(message) - MESSAGE_FIELDS):
            return f"{where}.{unknown[0]}: not accepted in a message (a message has {', '.join(sorted(MESSAGE_FIELDS))})"
        if problem := _content(message.get("content"), f"{where}.content"):
            return problem
    return None


def _content(content: Any, path: str) -> str | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{path} must be a string or a list of content parts"
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return f"{path}[{j}] must be an object with a type"
        if part["type"] != "text":
            return f"{path}[{j}].type: only text parts are served here, got {part['type']!r}"
        if not isinstance(part.get("text"), str):
            return f"{path}[{j}].text must be a string"
    return None


SAMPLING: dict[str, Check] = {
    "model": model_name, "max_tokens": integer(1), "temperature": number, "top_p": number, "top_k": integer(-1),
    "min_p": number, "n": one_choice, "stream": boolean, "stream_options": stream_options, "stop": strings,
    "presence_penalty": number, "frequency_penalty": number, "repetition_penalty": number, "logit_bias": logit_bias,
    "seed": integer(), "min_tokens": integer(0), "ignore_eos": boolean,
    # The tenant's own scheduling identity replaces both (tenant_policy.py); accepted, so vLLM clients work.
    "priority": integer(), "cache_salt": string,
    "user": string, "safety_identifier": string,
}
"""Fields both routes take: OpenAI's, and vLLM's sampling extras (top_k, min_p, repetition_penalty,
min_tokens, ignore_eos), each seen reaching vLLM through LiteLLM 1.108.7."""

FIELDS: dict[str, dict[str, Check]] = {
    "chat": {**SAMPLING, "messages": messages, "max_completion_tokens": integer(1), "logprobs": boolean,
             "top_logprobs": integer(0), "response_format": an_object, "tools": tools, "tool_choice": tool_choice,
             "parallel_tool_calls": boolean},
    "completion": {**SAMPLING, "prompt": prompt, "logprobs": integer(0), "echo": boolean},
}
REQUIRED = {"chat": ("model", "messages"), "completion": ("model", "prompt")}

WHY_NOT: dict[str, str] = {
    "extra_body": "send its fields at the top level of the request (OpenAI's SDKs do so themselves)",
    "extra_headers": "the gateway sets the engine's headers itself",
    "metadata": "the gateway records requests by the key's tenant and keeps no client metadata",
    "max_completion_tokens": "text completions take max_tokens",
    "best_of": "one sequence per request",
    "custom_llm_provider": "the gateway chooses how it reaches each engine",
    "api_base": "the gateway chooses how it reaches each engine",
    "api_key": "the gateway chooses how it reaches each engine",
    "base_url": "the gateway chooses how it reaches each engine",
    "timeout": "the gateway's timeouts are the platform's",
    "num_retries": "the gateway does not retry a request on the client's say",
    "fallbacks": "the platform's fallbacks are configured, not asked for",
}
"""Why a field LiteLLM would act on is refused, where the reason helps the client."""


def checked_body(kind: str, raw: bytes) -> tuple[bytes, str]:
    """The body LiteLLM reads for a request of `kind` ("chat" or "completion") and the model it names, or
    Refused (400)."""
    request = parse(raw)
    fields = FIELDS[kind]
    for name in request:
        if name not in fields:
            reason = WHY_NOT.get(name, f"a {kind} request takes {', '.join(sorted(fields))}")
            raise Refused(400, f"{name}: not accepted by this gateway; {reason}", name)
    for name in REQUIRED[kind]:
        if name not in request:
            raise Refused(400, f"{name}: missing", name)
    for name, value in request.items():
        if problem := fields[name](value, name):
            raise Refused(400, problem, name)
    for name in DROPPED:
        request.pop(name, None)
    return serialised(request), request["model"]


def parse(raw: bytes) -> dict[str, Any]:
    """The body as one JSON object of bounded depth, with every key once and only JSON's own numbers."""
    if not raw.strip():
        raise Refused(400, "the request has no body: send a JSON object")
    try:
        value = json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite,
                           parse_int=_int64)
    except RecursionError:
        raise Refused(400, f"the body nests objects or lists deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise Refused(400, f"invalid JSON: {error}") from None
    if not isinstance(value, dict):
        raise Refused(400, "the request body must be a JSON object")
    if depth(value) > MAX_DEPTH:
        raise Refused(400, f"the body nests objects or lists deeper than {MAX_DEPTH} levels")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} appears twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _int64(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise ValueError(f"{text[:20]}... does not fit in 64 bits")
    return value


def depth(value: Any) -> int:
    """How deeply objects and lists nest in `value` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def serialised(request: dict[str, Any]) -> bytes:
    """orjson, which LiteLLM reads bodies with too, and which writes one 40 times faster than json."""
    try:
        return orjson.dumps(request)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate (numbers were bounded as they were parsed)
        raise Refused(400, "a string holds a lone surrogate (\\ud800-\\udfff): not valid Unicode") from None


def prompt_tokens(data: dict[str, Any]) -> int:
    """About how many tokens a chat or completion request's prompt has, its tool definitions included
    (LiteLLM's counter for its model)."""
    import litellm

    try:
        if "messages" in data:
            return int(litellm.token_counter(model=data.get("model", ""), messages=data["messages"],
                                             tools=data.get("tools") or None))
        text = data.get("prompt", "")
        return int(litellm.token_counter(model=data.get("model", ""), text=text if isinstance(text, str) else " ".join(
            str(p) for p in text)))
    except Exception:  # noqa: BLE001 - an estimate; never fail a request over counting
        return len(json.dumps([data.get("messages") or data.get("prompt") or "", data.get("tools") or []])) // 4
