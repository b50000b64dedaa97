"""`tenantry local smoke`: one chat completion per tenant through the
gateway, with the tenant's own key."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from tenantry.local.health import LocalStackError
from tenantry.local.layout import HOST, Layout, State, gateway_process
from tenantry.stacks import plan_stack

SHED_HEADER = "X-Tenantry-Shed"
"""The tenant-policy plugin's header on a 429 for capacity (its SHED_HEADER; the plugin
imports LiteLLM, which the local stack's commands do not load)."""
SMOKE_PATIENCE_SECONDS = 15
"""Beyond spot's pause, how long the smoke check keeps asking for a tenant the
gateway sheds for capacity: one Retry-After of the plugin's (at most 10 s)."""


@dataclass(frozen=True)
class SmokeResult:
    tenant: str
    tier: str
    model: str
    status: int
    seconds: float
    detail: str
    text: str = ""
    shed: str | None = None
    """Why admission refused the tenant for capacity (the gateway's X-Tenantry-Shed), if it did."""

    @property
    def served(self) -> bool:
        return self.status == 200 and bool(self.text.strip())

    @property
    def ok(self) -> bool:
        """Served with text, or a lower tier shed for capacity: the policy at work on a
        busy stack, not a broken one. A guaranteed tenant shed has lost its reservation."""
        return self.served or (self.shed is not None and self.tier != "guaranteed")


def smoke(layout: Layout) -> list[SmokeResult]:
    """One chat completion per tenant, through the gateway with its own key.

    Spot tenants go first: any other tier's request pauses spot on its engine for
    spot_pause_after_others_seconds. A tenant shed for capacity is asked again after
    the Retry-After it was given, for as long as one pause and SMOKE_PATIENCE_SECONDS,
    then reported as shed; every other refusal (a key refused, an engine down, a 5xx)
    fails at once."""
    state = State.load(layout)
    if state is None or not layout.keys_file.exists():
        raise LocalStackError(f"no stack is up from {layout.root}: run `tenantry local up`")
    plan = plan_stack(state.spec)
    keys = json.loads(layout.keys_file.read_text())
    url = f"http://{HOST}:{state.ports[gateway_process(0)]}/v1/chat/completions"
    patience = plan.gateway.spot_pause_after_others_seconds + SMOKE_PATIENCE_SECONDS
    results = []
    for tenant in sorted(plan.tenants, key=lambda t: t.tier != "spot"):
        started = time.monotonic()
        sheds: list[str] = []
        while True:
            result, retry_after = request_once(url, keys[tenant.name], tenant.name, tenant.tier,
                                                 tenant.traffic[0].target)
            if result.shed is None or time.monotonic() + retry_after > started + patience:
                break
            sheds.append(result.shed)
            time.sleep(max(retry_after, 1))
        if sheds and result.shed is None:
            waited = time.monotonic() - started - result.seconds
            result = dataclasses.replace(result, detail=f"{result.detail} (after {waited:.0f} s shed: "
                                                        f"{', '.join(sorted(set(sheds)))})")
        results.append(result)
    return results


def request_once(url: str, key: str, tenant: str, tier: str, model: str,
                 timeout: float = 120) -> tuple[SmokeResult, float]:
    """One short chat completion with the tenant's key: the result, and the Retry-After the gateway asked for
    (0 without one)."""
    # min_tokens: random weights may end an answer at once; the check is whether the stack serves
    # text, not what the model picks (docs/decisions.md: The smoke check asks for at least one token).
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": f"hello from {tenant}"}],
                       "max_tokens": 8, "min_tokens": 1}).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    started = time.monotonic()
    text, shed, retry_after = "", None, 0.0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own gateway
            answer = json.loads(response.read())
            code = response.status
        text = answer["choices"][0]["message"]["content"] or ""
        tokens = answer["usage"]["completion_tokens"]
        detail = f"{tokens} tokens: {text[:48]!r}" if text.strip() else f"{tokens} tokens and no text"
    except urllib.error.HTTPError as error:
        code, detail = error.code, error.read().decode(errors="replace")[:200]
        shed = error.headers.get(SHED_HEADER) if code == 429 else None
        with contextlib.suppress(TypeError, ValueError):
            retry_after = float(error.headers.get("Retry-After"))
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as error:
        code, detail = 0, str(error)
    return SmokeResult(tenant, tier, model, code, time.monotonic() - started, detail, text, shed), retry_after
