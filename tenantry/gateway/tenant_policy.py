"""tenantry's tenant-policy plugin for the LiteLLM proxy.

Loaded by LiteLLM from its config (`litellm_settings.callbacks:
[tenant_policy.proxy_handler_instance]`), this file sits next to config.yaml
in the gateway (a ConfigMap on Kubernetes, a rendered file in the local
stack) and reads its settings, rendered from the Plan, from the JSON file
named by TENANTRY_POLICY_FILE.

What it does today: turns the authenticated key into scheduling identity.
The tenant is the key's team (its alias is the tenant name); the request
gets the tier's vLLM priority and the tenant's cache salt, and whatever the
client sent for either is replaced. LiteLLM's Router pops a top-level
`priority` for its own scheduler, so the priority travels in `extra_body`
and in the X-Vllm-Priority header, which both reach vLLM.
"""

from __future__ import annotations

import json
import os
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

VLLM_PRIORITY_HEADER = "X-Vllm-Priority"


def load_settings(path: str | None = None) -> dict[str, Any]:
    with open(path or os.environ["TENANTRY_POLICY_FILE"], encoding="utf-8") as f:
        return json.load(f)


class TenantPolicy(CustomLogger):
    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else load_settings()

    def tenant_of(self, user_api_key_dict: Any) -> dict[str, Any] | None:
        alias = getattr(user_api_key_dict, "team_alias", None)
        return self.settings["tenants"].get(alias) if alias else None

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str) -> dict:
        tenant = self.tenant_of(user_api_key_dict)
        if tenant is None:
            return data  # the master key or a key outside tenantry: no tenant policy to apply
        extra_body = dict(data.get("extra_body") or {})
        extra_body["priority"] = tenant["priority"]
        extra_body.pop("cache_salt", None)
        data["extra_body"] = extra_body
        data.pop("priority", None)
        headers = {k: v for k, v in (data.get("extra_headers") or {}).items() if k.lower() != VLLM_PRIORITY_HEADER.lower()}
        headers[VLLM_PRIORITY_HEADER] = str(tenant["priority"])
        data["extra_headers"] = headers
        if tenant["cache_salt"]:
            data["cache_salt"] = tenant["cache_salt"]
        else:
            data.pop("cache_salt", None)
        return data


# LiteLLM loads this instance; without TENANTRY_POLICY_FILE the gateway fails at start, not later.
proxy_handler_instance = TenantPolicy()
