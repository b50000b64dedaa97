"""An engine's replica bounds under KEDA: the floor is the engine's `replicas`, on which the Plan
reserves guaranteed slots and admits traffic; the ceiling is what the pool must have GPUs for; and
replicas are removed no faster than one can start again (docs/decisions.md: Engines scale on vLLM's
own signals, between the reservation and the pool)."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.plan.notes import EngineNotes
from tenantry.spec.schema import EngineSpec

SCALE_DOWN_FLOOR_SECONDS = 300
"""The shortest scale-down stabilisation: the HorizontalPodAutoscaler's own default."""
SCALE_DOWN_CEILING_SECONDS = 3600
"""The longest the HorizontalPodAutoscaler accepts (behavior.scaleDown.stabilizationWindowSeconds)."""
HPA_MAX_PERIOD_SECONDS = 1800
"""The longest period of a scaling policy the API server accepts (HPAScalingPolicy.periodSeconds: more than 0, at
most 1800); a policy with a longer one makes the whole HorizontalPodAutoscaler invalid, and KEDA's ScaledObject
never gets one."""
HPA_SYNC_SECONDS = 15
"""The HorizontalPodAutoscaler's default sync period (kube-controller-manager's
--horizontal-pod-autoscaler-sync-period): it asks KEDA's metrics server for the signals that often."""


@dataclass(frozen=True, kw_only=True)
class AutoscalingPlan:
    min_replicas: int
    """The engine's `replicas`: never scaled below, so the slots reserved on it always exist."""
    max_replicas: int
    scale_down_after_seconds: int
    """How long the signals must stay low before a replica is removed: at least the engine's start-up estimate
    (PodPlan.startup_seconds), so a replica is not given back that could not be started again in time."""
    scale_down_period_seconds: int
    """One replica is removed per this period: the scale-down window, within the longest period the
    HorizontalPodAutoscaler accepts (HPA_MAX_PERIOD_SECONDS)."""
    polling_seconds: int
    """How often KEDA reads the signals (the ScaledObject's pollingInterval): the HorizontalPodAutoscaler's sync
    period, which paces every decision from one replica up (an engine is never scaled to zero, the one step KEDA
    takes itself); more often only queries Prometheus more, and the engines are scraped at least as often."""


def plan_autoscaling(engine: EngineSpec, cpu: bool, startup_seconds: int, notes: EngineNotes) -> AutoscalingPlan | None:
    if engine.autoscaling is None:
        return None
    most = engine.autoscaling.max_replicas
    if cpu:
        notes.refuse("autoscaling", "the local stack runs one vLLM process per engine and no autoscaler: "
                     "autoscaling needs a Kubernetes GPU pool")
    if most < engine.replicas:
        notes.refuse("autoscaling.max_replicas", f"{most} is fewer than replicas ({engine.replicas}), the "
                     f"autoscaler's floor: raise max_replicas or lower replicas")
    elif most == engine.replicas:
        notes.warn("autoscaling.max_replicas", f"equals replicas ({most}): there is nothing to scale")
    return AutoscalingPlan(
        min_replicas=engine.replicas,
        max_replicas=max(most, engine.replicas),
        scale_down_after_seconds=(window := min(SCALE_DOWN_CEILING_SECONDS, max(SCALE_DOWN_FLOOR_SECONDS,
                                                                                 startup_seconds))),
        scale_down_period_seconds=min(HPA_MAX_PERIOD_SECONDS, window),
        polling_seconds=HPA_SYNC_SECONDS,
    )
