"""The tenant-policy plugin's settings, typed and read once, when the plugin loads.

tenantry renders them from the Plan (tenantry/configs/litellm.py::tenant_policy_settings
decides every value); here every key is required and typed, so a file that is
missing a key, has one too many or one of the wrong type stops the gateway at
start with the key's path, instead of failing a request later.
"""

# No `from __future__ import annotations`: the parser reads these annotations as
# types, whichever way the module was loaded.
import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

Tier = Literal["guaranteed", "best-effort", "spot"]


class SettingsError(ValueError):
    """The settings do not match what the plugin reads; the message names the key."""


@dataclass(frozen=True, kw_only=True)
class TenantSettings:
    tier: Tier
    models: tuple[str, ...]
    """The only names its key is served: its models, adapters and fallbacks (its team's model list)."""
    priority: int
    """vLLM's scheduling priority for the tier (lower runs first)."""
    cache_salt: str | None
    """None: the tenant shares the unsalted prefix cache."""
    max_concurrency: int
    max_prompt_tokens: int | None
    max_output_tokens: int | None
    """None (or 0): no cap for the tier."""
    ttft_objective_seconds: float
    itl_objective_seconds: float
    """The tenant's p95 objectives; a request over either counts as a miss against its error budget."""
    overload_fallback: tuple[str, ...] = ()
    """Models to serve the tenant's request, in order, when its engine's capacity would refuse it."""


OBJECTIVE_HEADER = "x-llm-d-inference-objective"
"""Names a request's InferenceObjective to llm-d's endpoint picker (pkg/epp/metadata/consts.go, v0.10.0); one it
does not know gets the picker's default priority, 0."""
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
"""The flow the picker's flow control shares capacity fairly between, within a priority: the tenant."""
PICKER_HEADERS = frozenset({OBJECTIVE_HEADER, FAIRNESS_HEADER, "x-gateway-inference-objective",
                            "x-gateway-inference-fairness-id"})
"""Both, with the deprecated names the picker still reads: only the plugin sets them."""


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    replicas: int
    """The replicas the Plan's slots were counted on: the engine's floor, under an autoscaler too."""
    max_replicas: int
    """The autoscaler's ceiling (`replicas` for an engine that does not scale)."""
    max_num_seqs: int
    """Sequences one replica runs at once."""
    shared_slots: int
    """Unreserved slots on `replicas` replicas; each replica the autoscaler adds brings max_num_seqs more."""
    reserved: dict[str, int]
    """Slots the Plan reserved on the engine, by tenant."""
    tier_slots: dict[str, int]
    """Most sequences of a tier at once on the engine, by tier (best-effort, spot); a tier not named is capped
    only by the unreserved slots."""
    models: tuple[str, ...]
    """The names it serves: its own and its adapters'."""
    metrics_urls: tuple[str, ...]
    """Each replica's /metrics; empty when Prometheus is asked instead."""
    objectives: dict[str, str]
    """By tier, the InferenceObjective the endpoint picker of a kv-aware engine reads for the tier's requests
    (tenantry/plan/routing.py); empty for an engine behind its Service."""

    def live_replicas(self, reported: int | None) -> int:
        """The replicas admission counts slots on: those the engine's fresh metrics report, never fewer than the
        floor (the reserved slots live there, and a replica restarting is still the Plan's) nor more than the
        ceiling; the floor when the load is unknown or stale."""
        return self.replicas if reported is None else min(max(reported, self.replicas), self.max_replicas)

    def shared_slots_on(self, replicas: int) -> int:
        """Unreserved slots with `replicas` running: the Plan's, and every slot of a replica beyond the floor
        (the Plan reserves on the floor alone, so whatever the autoscaler adds is shared)."""
        return self.shared_slots + (replicas - self.replicas) * self.max_num_seqs

    def routed_headers(self, headers: dict | None, tenant: str, tier: str) -> dict:
        """The request's headers as the engine receives them: to a kv-aware engine's picker, the tier's objective
        and the tenant as its flow; whatever of the picker's headers the client sent (in extra_headers, in any
        case, under any name the picker reads) dropped, so a tenant cannot name a more critical objective."""
        kept = {k: v for k, v in (headers or {}).items() if k.lower() not in PICKER_HEADERS}
        if tier not in self.objectives:
            return kept
        return {**kept, OBJECTIVE_HEADER: self.objectives[tier], FAIRNESS_HEADER: tenant}


@dataclass(frozen=True, kw_only=True)
class AdmissionSettings:
    shed_spot_at_kv_usage: float
    shed_best_effort_at_kv_usage: float
    shed_spot_at_waiting: int
    shed_best_effort_at_waiting: int
    """Per replica of the engine."""
    metrics_max_age_seconds: float
    wait_at_concurrency_limit_seconds: float
    spot_pause_after_others_seconds: float
    """0: spot is not paused after the other tiers' requests."""


@dataclass(frozen=True, kw_only=True)
class MetricsSettings:
    cache_seconds: float
    timeout_seconds: float
    prometheus_url: str | None
    """Where the engines' load is read on Kubernetes; None: each replica's /metrics."""


@dataclass(frozen=True, kw_only=True)
class FrontDoorSettings:
    chat_routes: tuple[str, ...]
    completion_routes: tuple[str, ...]
    """The paths a tenant's key POSTs to, exactly."""
    model_list_routes: tuple[str, ...]
    """The paths a tenant's key GETs its model list from, and one model's entry below them."""
    open_routes: tuple[str, ...]
    """Paths anyone GETs, exactly (the health probes)."""
    spend_view_routes: dict[str, tuple[str, ...]]
    """Paths a tenant's key GETs exactly, to read its own key and team (its spend view), with the query
    parameters each takes; never another key's."""
    max_request_bytes: int
    request_read_seconds: float
    """How long a request's body may take to arrive in full."""


@dataclass(frozen=True, kw_only=True)
class PolicySettings:
    metrics: MetricsSettings
    tenants: dict[str, TenantSettings]
    """By the team alias the reconciler gives the tenant's keys."""
    engines: dict[str, EngineSettings]
    admission: AdmissionSettings
    front_door: FrontDoorSettings


def load_settings(path: str | None = None) -> PolicySettings:
    """The settings from `path`, or from the file TENANTRY_POLICY_FILE names."""
    path = path or os.environ.get("TENANTRY_POLICY_FILE")
    if not path:
        raise SettingsError("TENANTRY_POLICY_FILE is not set: it names the tenant-policy settings (JSON)")
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    try:
        return parse_settings(raw)
    except SettingsError as error:
        raise SettingsError(f"{path}: {error}") from None


def parse_settings(raw: Any) -> PolicySettings:
    return _parse(PolicySettings, raw, "")


def _parse(kind: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        return _parse_fields(kind, value, path)
    if origin is types.UnionType:  # `X | None`
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _parse(inner, value, path)
    if origin is Literal:
        if value not in args:
            raise SettingsError(f"{path}: must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is dict:
        _expect(value, dict, "an object", path)
        return {key: _parse(args[1], item, f"{path}.{key}") for key, item in value.items()}
    if origin is tuple:
        _expect(value, list, "a list", path)
        return tuple(_parse(args[0], item, f"{path}[{i}]") for i, item in enumerate(value))
    if kind is float:
        _expect(value, (int, float), "a number", path)
        return float(value)
    _expect(value, kind, {int: "an integer", str: "a string"}[kind], path)
    return value


def _parse_fields(kind: Any, value: Any, path: str) -> Any:
    _expect(value, dict, "an object", path)
    hints = typing.get_type_hints(kind)
    names = [field.name for field in dataclasses.fields(kind)]
    for key in value:
        if key not in names:
            raise SettingsError(f"{_join(path, key)}: unknown key (expected {', '.join(names)})")
    for name in names:
        if name not in value:
            raise SettingsError(f"{_join(path, name)}: missing")
    return kind(**{name: _parse(hints[name], value[name], _join(path, name)) for name in names})


def _expect(value: Any, kind: type | tuple[type, ...], described: str, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, kind):  # JSON's true is no number
        raise SettingsError(f"{path or 'the settings'}: must be {described}, got {value!r}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
