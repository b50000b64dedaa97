"""`routing: kv-aware` in the Plan: the pool, the Gateway and one InferenceObjective per tier of the stack, whose
priority is best-effort's vLLM priority minus the tier's (worked by hand below), so the tiers keep their order,
best-effort sits at the picker's default of 0 and spot below it, where the picker sheds while saturated; refused
on the local stack's CPU pool, warned with one replica, refused when misspelt."""

from __future__ import annotations

import yaml

from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tenantry.stacks import STACKS_DIR, plan_stack
from tests.unit.specs import base_spec, to_yaml
from tests.unit.specs import set_field as _set
from tests.unit.test_invalid_specs import test_invalid_spec_is_refused_with_path_and_reason as _refused_at


def _plan(spec):
    return plan(load_spec_text(to_yaml(spec)), "test")


def test_the_shipped_stack_routes_its_engine_through_a_pool_with_one_objective_per_tier():
    engine = plan_stack("h200-many-adapters").engine("llama-70b")
    assert engine.routing is not None
    assert (engine.routing.pool, engine.routing.gateway) == ("llama-70b-pool", "llama-70b-inference")
    # Default tiers: vLLM priorities guaranteed 0, best-effort 10, spot 100; the picker's are 10 - those.
    assert [(o.name, o.tier, o.priority) for o in engine.routing.objectives] == [
        ("llama-70b-guaranteed", "guaranteed", 10), ("llama-70b-best-effort", "best-effort", 0),
        ("llama-70b-spot", "spot", -90)]
    assert (engine.routing.picker_cpu, engine.routing.picker_memory_bytes) == (4.0, 16 * 2**30)
    assert plan_stack("h100-isolation").engines[0].routing is None  # service, the default


def test_objectives_follow_the_stacks_own_tier_priorities_and_only_its_tiers():
    spec = base_spec()
    spec["engines"][0]["routing"] = "kv-aware"
    spec["tiers"] = {"guaranteed": {"priority": -5}, "best-effort": {"priority": 20}, "spot": {"priority": 50}}
    engine = _plan(spec).engines[0]
    tiers = {t["tier"] for t in spec["tenants"]}
    assert {(o.tier, o.priority) for o in engine.routing.objectives} == {
        (tier, {"guaranteed": 25, "best-effort": 0, "spot": -30}[tier]) for tier in tiers}
    assert [o.name for o in engine.routing.objectives] == [f"big-{o.tier}" for o in engine.routing.objectives]
    assert _plan(base_spec()).engines[1].routing is None


def test_the_local_stack_refuses_kv_aware_routing_and_one_replica_is_warned():
    local = yaml.safe_load((STACKS_DIR / "local.yaml").read_text())
    local["engines"][0]["routing"] = "kv-aware"
    result = plan(load_spec_text(yaml.safe_dump(local)), "local")
    assert [(r.path, r.message) for r in result.refusals] == [
        ("engines[0].routing", "the local stack runs one vLLM process per engine and no inference Gateway: "
                               "kv-aware routing needs a Kubernetes GPU pool (engine tiny)")]
    spec = base_spec()
    spec["engines"][0].update(routing="kv-aware", replicas=1)
    result = _plan(spec)
    assert result.fits and [w.path for w in result.warnings] == ["engines[0].routing"]
    spec["engines"][0]["autoscaling"] = {"max_replicas": 3}  # the autoscaler may add replicas to choose between
    assert not [w for w in _plan(spec).warnings if w.path == "engines[0].routing"]


def test_an_unknown_routing_is_refused_with_its_field():
    _refused_at(_set("engines.0.routing", "round-robin"), "engines[0].routing", "'service' or 'kv-aware'")
