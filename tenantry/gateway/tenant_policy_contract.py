"""A tenant's contract applied to one request, inside the gateway: the one rule on the model it is served,
its scheduling identity, its tier's caps; and refusals in tenantry's words (ERROR_HEADER tells the front
door to pass them as they are).

Loaded beside the plugin (tenant_policy.py imports it), by path: no `from __future__ import annotations`.
"""

import logging
from typing import Any

from litellm.proxy._types import ProxyException

from tenant_policy_errors import ERROR_HEADER
from tenant_policy_metrics import OVERRIDES, REFUSED
from tenant_policy_request import prompt_tokens
from tenant_policy_settings import TenantSettings

VLLM_PRIORITY_HEADER = "X-Vllm-Priority"
SHED_HEADER = "X-Tenantry-Shed"
"""On a 429 for capacity (an engine busy, paused for spot, or its load unknown), the
reason; absent when the tenant's own limits refused it. Clients (the smoke check)
tell a shed from a fault by it."""
OWN_METADATA_PREFIX = "tenantry_"
"""The plugin's keys in a request's metadata: set by the plugin alone, never taken from a client."""
TENANT_CALL_TYPES = frozenset({"acompletion", "atext_completion"})
"""Chat and text completions: all a tenant's key is served (the front door's routes)."""

log = logging.getLogger("tenantry.tenant_policy")


def refuse(code: int, message: str, kind: str, retry_after: int | None = None,
           shed: str | None = None, param: str | None = None) -> ProxyException:
    """A refusal in tenantry's words: ERROR_HEADER tells the front door to pass it as it is."""
    headers = {ERROR_HEADER: kind}
    if retry_after:
        headers["Retry-After"] = str(retry_after)
    if shed:
        headers[SHED_HEADER] = shed
    return ProxyException(message=message, type=kind, param=param, code=code, headers=headers)


def drop_own_metadata(data: dict) -> None:
    """Whatever of the plugin's own metadata keys a request arrived with (a client's tenantry_rerouted came back
    as X-Tenantry-Rerouted; its tenantry_slots would have released another request's slots)."""
    for field in ("metadata", "litellm_metadata"):
        metadata = data.get(field)
        if isinstance(metadata, dict):
            for key in [k for k in metadata if isinstance(k, str) and k.startswith(OWN_METADATA_PREFIX)]:
                del metadata[key]


def served_model(name: str, tenant: TenantSettings, data: dict, call_type: str) -> None:
    """The one rule: LiteLLM routes the request to `data["model"]` (resolved by now from the body, the
    query string and the path), which must be one of the tenant's models."""
    if call_type not in TENANT_CALL_TYPES:
        REFUSED.labels(tenant=name, tier=tenant.tier, reason="route").inc()
        raise refuse(403, f"a tenant's key calls chat and text completions only, not {call_type} "
                     f"(tenant {name})", "permission_denied")
    model = data.get("model")
    if model not in tenant.models:
        REFUSED.labels(tenant=name, tier=tenant.tier, reason="model").inc()
        raise refuse(403, f"model {model!r} is not available for this API key (tenant {name}); GET /v1/models "
                     "lists the models it may call", "permission_denied", param="model")


def identity(name: str, tenant: TenantSettings, data: dict) -> None:
    """The tier's priority and the tenant's cache salt, whatever the request said (counted when it said
    otherwise)."""
    priority = tenant.priority
    extra_body = dict(data.get("extra_body") or {})
    for field, sent in (("priority", data.pop("priority", None)),
                        ("extra_body.priority", extra_body.get("priority"))):
        if sent is not None and sent != priority:
            overridden(name, field, sent, priority)
    headers = dict(data.get("extra_headers") or {})
    for header in [h for h in headers if h.lower() == VLLM_PRIORITY_HEADER.lower()]:
        if str(headers[header]) != str(priority):
            overridden(name, "X-Vllm-Priority", headers[header], priority)
        del headers[header]
    proxy_headers = (data.get("proxy_server_request") or {}).get("headers") or {}
    if any(h.lower() == VLLM_PRIORITY_HEADER.lower() for h in proxy_headers):
        overridden(name, "X-Vllm-Priority", "client header", priority)
    extra_body["priority"] = priority
    headers[VLLM_PRIORITY_HEADER] = str(priority)
    salt = tenant.cache_salt
    for field, sent in (("cache_salt", data.get("cache_salt")),
                        ("extra_body.cache_salt", extra_body.pop("cache_salt", None))):
        if sent is not None and sent != salt:
            overridden(name, field, sent, salt)
    if salt:
        data["cache_salt"] = salt
    else:
        data.pop("cache_salt", None)
    data["extra_body"] = extra_body
    data["extra_headers"] = headers


def overridden(tenant: str, field: str, sent: Any, kept: Any) -> None:
    OVERRIDES.labels(tenant=tenant, field=field.split(".")[-1]).inc()
    log.info("tenantry: tenant %s sent %s=%r; replaced by %r", tenant, field, sent, kept)


def caps(name: str, tenant: TenantSettings, data: dict) -> None:
    """The tier's caps on every spelling of an output length and on the prompt; the output cap where the
    request named no length."""
    cap_out = tenant.max_output_tokens
    if cap_out:
        for field in ("max_tokens", "max_completion_tokens"):
            asked = data.get(field)
            if asked is not None and int(asked) > cap_out:
                REFUSED.labels(tenant=name, tier=tenant.tier, reason="max_tokens").inc()
                raise refuse(400, f"{field} {asked} exceeds the {cap_out} tokens the {tenant.tier} tier allows "
                             f"(tenant {name})", "invalid_request_error", param=field)
        if data.get("max_tokens") is None and data.get("max_completion_tokens") is None:
            data["max_tokens"] = cap_out
    cap_in = tenant.max_prompt_tokens
    if cap_in:
        tokens = prompt_tokens(data)
        if tokens > cap_in:
            REFUSED.labels(tenant=name, tier=tenant.tier, reason="prompt").inc()
            raise refuse(400, f"the prompt has about {tokens} tokens; the {tenant.tier} tier allows "
                         f"{cap_in} (tenant {name})", "invalid_request_error")
