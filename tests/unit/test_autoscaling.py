"""Engine replica bounds under KEDA (tenantry/plan/autoscaling.py): the floor is `replicas`, on which slots are
reserved; the pool must hold the ceiling; replicas go no faster than one starts."""

from __future__ import annotations

import yaml

from tenantry.plan import plan
from tenantry.plan.autoscaling import (HPA_MAX_PERIOD_SECONDS, SCALE_DOWN_CEILING_SECONDS, SCALE_DOWN_FLOOR_SECONDS,
                                       plan_autoscaling)
from tenantry.plan.notes import Notes
from tenantry.spec import load_spec_text
from tenantry.spec.schema import EngineSpec
from tenantry.stacks import STACKS_DIR
from tests.unit.specs import base_spec, to_yaml


def _plan(spec: dict):
    return plan(load_spec_text(to_yaml(spec)), "test")


def test_the_floor_is_replicas_and_reservations_are_made_on_it_while_the_pool_holds_the_ceiling():
    spec = base_spec()
    spec["engines"][0]["replicas"] = 1
    spec["engines"][0]["autoscaling"] = {"max_replicas": 2}
    result = _plan(spec)
    assert result.fits, result.refusals
    big = result.engine("big")
    assert (big.replicas, big.autoscaling.min_replicas, big.autoscaling.max_replicas, big.most_replicas) == (1, 1, 2, 2)
    assert big.slots.capacity == big.kv.max_num_seqs  # one replica's slots: what the floor guarantees
    assert next(p for p in result.pools if p.name == "whole").gpus_used == 8  # two TP-4 replicas at the ceiling
    fixed = base_spec()
    fixed["engines"][0]["replicas"] = 1
    assert next(p for p in _plan(fixed).pools if p.name == "whole").gpus_used == 4


def _engine(replicas: int, most: int) -> EngineSpec:
    return EngineSpec.model_validate({"name": "e", "model": "llama-3.1-8b", "placement": {"pool": "p"},
                                      "replicas": replicas, "autoscaling": {"max_replicas": most}})


def test_the_scale_down_window_is_the_start_up_estimate_within_the_hpas_limits():
    notes = Notes()
    about = notes.about_engine(0, "e")
    assert plan_autoscaling(_engine(1, 3), False, 1092, about).scale_down_after_seconds == 1092
    assert plan_autoscaling(_engine(1, 3), False, 40, about).scale_down_after_seconds == SCALE_DOWN_FLOOR_SECONDS
    assert plan_autoscaling(_engine(1, 3), False, 9000, about).scale_down_after_seconds == SCALE_DOWN_CEILING_SECONDS
    assert (SCALE_DOWN_FLOOR_SECONDS, SCALE_DOWN_CEILING_SECONDS) == (300, 3600)  # the HPA's default and maximum
    # One replica per window, but never per more than the 1,800 s a scaling policy's period may last: an engine
    # that takes 40 minutes to start is given back once its signals stayed low for 40 minutes, then one per 30.
    slow = plan_autoscaling(_engine(1, 3), False, 2400, about)
    assert (slow.scale_down_after_seconds, slow.scale_down_period_seconds) == (2400, HPA_MAX_PERIOD_SECONDS) == (
        2400, 1800)
    assert plan_autoscaling(_engine(1, 3), False, 1092, about).scale_down_period_seconds == 1092
    assert notes.refusals == [] and notes.warnings == []


def test_a_ceiling_equal_to_the_floor_is_a_warning_and_the_local_stack_refuses_autoscaling():
    spec = base_spec()
    spec["engines"][0]["autoscaling"] = {"max_replicas": 2}
    result = _plan(spec)
    assert result.fits and [(w.path, w.message) for w in result.warnings] == [
        ("engines[0].autoscaling.max_replicas", "equals replicas (2): there is nothing to scale (engine big)")]
    local = yaml.safe_load((STACKS_DIR / "local.yaml").read_text())
    local["engines"][0]["autoscaling"] = {"max_replicas": 2}
    result = plan(load_spec_text(yaml.safe_dump(local)), "local")
    assert [(r.path, r.message) for r in result.refusals if "autoscal" in r.message] == [
        ("engines[0].autoscaling", "the local stack runs one vLLM process per engine and no autoscaler: "
                                   "autoscaling needs a Kubernetes GPU pool (engine tiny)")]


def test_without_autoscaling_nothing_changes():
    result = _plan(base_spec())
    assert all(e.autoscaling is None and e.most_replicas == e.replicas for e in result.engines)
