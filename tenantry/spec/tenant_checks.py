"""Cross-field checks of the tenants: what they may call exists and is theirs, traffic shares add up,
a typical request fits the engines it reaches, and no two tenants share a cache salt by accident."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tenantry.findings import Loc
from tenantry.spec.problems import Problem, duplicates, listing, suggest
from tenantry.spec.resolve import cache_salt, engine_max_context, group_cache_salt, resolve_model
from tenantry.spec.schema import EngineSpec, Spec, TenantSpec


def check_tenants(spec: Spec) -> list[Problem]:
    names = _TenantNames.of(spec)
    own_salts: dict[str, str] = {}
    problems = duplicates([t.name for t in spec.tenants], ("tenants",), "tenant")
    if spec.tiers.guaranteed.max_engine_slots is not None:
        problems.append((("tiers", "guaranteed", "max_engine_slots"), "guaranteed tenants run in the slots reserved "
                         "for them, which no cap may take away; cap best-effort or spot instead"))
    for i, tenant in enumerate(spec.tenants):
        loc: Loc = ("tenants", i)
        problems += _check_allowed(tenant, names, loc)
        problems += _check_traffic(tenant, loc)
        problems += _check_overload_fallback(tenant, loc)
        problems += _check_typical_request(tenant, names, loc)
        problems += _check_cache_salt(tenant, names, own_salts, loc)
    return problems


@dataclass(frozen=True, kw_only=True)
class _TenantNames:
    """What a tenant's names may refer to, first definition winning (duplicates are reported apart)."""

    engines: dict[str, EngineSpec]
    adapter_owner: dict[str, str]
    adapter_engine: dict[str, str]
    group_salts: set[str]

    @staticmethod
    def of(spec: Spec) -> _TenantNames:
        engines: dict[str, EngineSpec] = {}
        adapter_owner: dict[str, str] = {}
        adapter_engine: dict[str, str] = {}
        for engine in spec.engines:
            engines.setdefault(engine.name, engine)
            for adapter in engine.adapters:
                adapter_owner.setdefault(adapter.name, adapter.tenant)
                adapter_engine.setdefault(adapter.name, engine.name)
        return _TenantNames(
            engines=engines, adapter_owner=adapter_owner, adapter_engine=adapter_engine,
            group_salts={group_cache_salt(t.cache.group) for t in spec.tenants if t.cache.group},
        )


def _check_allowed(tenant: TenantSpec, names: _TenantNames, loc: Loc) -> list[Problem]:
    """Models are engines, adapters are the tenant's own, and each is listed once."""
    problems: list[Problem] = []
    if not tenant.models and not tenant.adapters:
        problems.append(((*loc, "models"), "the tenant may call nothing: list at least one engine or adapter"))
    for j, model in enumerate(tenant.models):
        if model in names.engines:
            continue
        if model in names.adapter_owner:
            problems.append(((*loc, "models", j), f"'{model}' is a LoRA adapter; list it under adapters"))
        else:
            problems.append(
                ((*loc, "models", j), f"'{model}' is not served by any engine{suggest(model, names.engines)}; "
                 f"engines: {listing(names.engines)}")
            )
    for j, name in enumerate(tenant.adapters):
        owner = names.adapter_owner.get(name)
        if owner is None:
            is_engine = name in names.engines
            hint = "; it is an engine, list it under models" if is_engine else suggest(name, names.adapter_owner)
            problems.append(((*loc, "adapters", j), f"no engine serves an adapter named '{name}'{hint}"))
        elif owner != tenant.name:
            problems.append(
                ((*loc, "adapters", j), f"adapter '{name}' belongs to tenant '{owner}'; a tenant may only use its "
                 "own adapters")
            )
    for key, values in (("models", tenant.models), ("adapters", tenant.adapters)):
        for name, count in Counter(values).items():
            if count > 1:
                problems.append(((*loc, key), f"lists '{name}' {count} times"))
    return problems


def _allowed(tenant: TenantSpec) -> list[str]:
    return list(dict.fromkeys(tenant.models + tenant.adapters))


def _targets(tenant: TenantSpec) -> list[str]:
    """What the tenant sends traffic to: its traffic shares' targets, or everything it may call."""
    return [share.target for share in tenant.traffic] if tenant.traffic is not None else _allowed(tenant)


def _check_traffic(tenant: TenantSpec, loc: Loc) -> list[Problem]:
    if tenant.traffic is None:
        return []
    problems: list[Problem] = []
    allowed = _allowed(tenant)
    for j, share in enumerate(tenant.traffic):
        if share.target not in allowed:
            problems.append(
                ((*loc, "traffic", j, "target"), f"'{share.target}' is not among the tenant's models or adapters"
                 f"{suggest(share.target, allowed)}")
            )
    for name, count in Counter(_targets(tenant)).items():
        if count > 1:
            problems.append(((*loc, "traffic"), f"'{name}' appears {count} times; give it one share"))
    total = sum(share.share for share in tenant.traffic)
    if abs(total - 1.0) > 1e-6:
        problems.append(((*loc, "traffic"), f"shares must sum to 1, they sum to {total:g}"))
    return problems


def _check_typical_request(tenant: TenantSpec, names: _TenantNames, loc: Loc) -> list[Problem]:
    """A typical request must fit the context of every engine the tenant's traffic reaches."""
    problems: list[Problem] = []
    needed = tenant.typical.prompt_tokens + tenant.typical.output_tokens
    reached = {names.adapter_engine.get(t, t) for t in _targets(tenant)}
    for engine in (names.engines[n] for n in sorted(reached) if n in names.engines):
        resolved = resolve_model(engine)
        if resolved is None:
            continue
        limit = engine_max_context(engine, resolved.architecture)
        if needed > limit:
            problems.append(
                ((*loc, "typical"), f"a typical request ({tenant.typical.prompt_tokens} + "
                 f"{tenant.typical.output_tokens} = {needed} tokens) exceeds engine '{engine.name}''s "
                 f"max_context of {limit}")
            )
    return problems


def _check_cache_salt(tenant: TenantSpec, names: _TenantNames, own_salts: dict[str, str], loc: Loc) -> list[Problem]:
    """No two tenants share an own salt, and no own salt is a shared group's: either would share a cache
    by accident. `own_salts` collects each own salt's first tenant."""
    salt = cache_salt(tenant)
    if tenant.cache.isolation != "own" or salt is None:
        return []
    problems: list[Problem] = []
    if salt in own_salts:
        problems.append(
            ((*loc, "cache", "salt"), f"'{salt}' is also tenant '{own_salts[salt]}''s own salt; tenants that "
             "should share a cache belong in a shared group")
        )
    elif salt in names.group_salts:
        problems.append(((*loc, "cache", "salt"), f"'{salt}' is the salt of a shared cache group"))
    own_salts.setdefault(salt, tenant.name)
    return problems


def _check_overload_fallback(tenant: TenantSpec, loc: Loc) -> list[Problem]:
    """An overload fallback is one of the tenant's own models (its key is allowed nothing else), listed once."""
    problems: list[Problem] = []
    for j, name in enumerate(tenant.overload_fallback):
        if name not in tenant.models:
            problems.append(((*loc, "overload_fallback", j), f"'{name}' is not one of the tenant's models "
                             f"({listing(tenant.models) or 'none'}): an overload fallback stays within what it may "
                             "call"))
    for name, count in Counter(tenant.overload_fallback).items():
        if count > 1:
            problems.append(((*loc, "overload_fallback"), f"lists '{name}' {count} times"))
    return problems
