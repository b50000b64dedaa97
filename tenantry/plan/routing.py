"""How the gateway reaches an engine's replicas.

`service`: the engine's Service spreads requests over its replicas, blind to what each holds.
`kv-aware`: LiteLLM calls the engine's own inference Gateway (Gateway API, Istio), whose route's backend is an
InferencePool (Gateway API Inference Extension) of the engine's serving pods; the pool's endpoint picker (llm-d's
router) scores each replica on the prompt prefix it already holds in its KV cache, its queue and its KV-cache use,
and the Gateway sends the request there. Each tenant's tier reaches the picker as an InferenceObjective of the pool,
named in a header the tenant plugin sets, so that criticality survives routing
(docs/decisions.md: KV-aware routing is llm-d's endpoint picker behind one Istio Gateway per engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.plan.notes import EngineNotes
from tenantry.spec.fields import Tier
from tenantry.spec.schema import EngineSpec, Spec

TIERS: tuple[Tier, ...] = ("guaranteed", "best-effort", "spot")
PICKER_CPU = 4.0
PICKER_MEMORY_BYTES = 16 * 2**30
"""The endpoint picker's pod: llm-d's chart asks 8 CPUs, without a limit, and 8 GiB, limited at 16 GiB
(config/charts/routerlib/values.yaml, v0.10.0): its prefix index and the replicas' metrics are held in memory.
tenantry limits every container and holds memory at its request, so: 16 GiB, and 4 CPUs bursting to 8."""


@dataclass(frozen=True, kw_only=True)
class ObjectivePlan:
    """One tier on one pool: the InferenceObjective the picker reads for the tier's requests."""

    name: str
    tier: Tier
    priority: int
    """The picker's priority: higher is more critical (the InferenceObjective CRD), the reverse of vLLM's, where
    lower runs first. It is best-effort's vLLM priority minus the tier's, so the tiers keep their order and
    best-effort sits at 0, the picker's default for a request whose objective it does not know; below 0 the picker
    sheds a request while the pool is saturated (pkg/epp/requestcontrol/admission.go), which is spot's contract,
    idle capacity only. Guaranteed and best-effort are never shed there: tenantry's own admission decides them."""


@dataclass(frozen=True, kw_only=True)
class KvRoutingPlan:
    pool: str
    """The InferencePool, and the Helm release of llm-d's router chart that creates it with its endpoint picker."""
    gateway: str
    """The engine's Gateway; Istio names its Deployment and Service `<gateway>-istio`."""
    objectives: tuple[ObjectivePlan, ...]
    """One per tier of the stack's tenants, most critical first: any tenant may be sent here by a fallback."""
    picker_cpu: float = PICKER_CPU
    picker_memory_bytes: int = PICKER_MEMORY_BYTES

    def objective(self, tier: str) -> ObjectivePlan:
        return next(o for o in self.objectives if o.tier == tier)

    @property
    def picker_deployment(self) -> str:
        """The endpoint picker's Deployment, Service, ServiceAccount, Role and ConfigMap: `<pool>-epp`, as llm-d's
        router chart names them (deploy renders them, monitoring watches the Deployment)."""
        return f"{self.pool}-epp"

    @property
    def gateway_deployment(self) -> str:
        """The Deployment and Service istiod makes for the Gateway: `<gateway>-istio`."""
        return f"{self.gateway}-istio"


def plan_routing(engine: EngineSpec, spec: Spec, cpu: bool, notes: EngineNotes) -> KvRoutingPlan | None:
    """None for `service`; for `kv-aware`, the pool, the Gateway and the tiers' objectives."""
    if engine.routing == "service":
        return None
    if cpu:
        notes.refuse("routing", "the local stack runs one vLLM process per engine and no inference Gateway: "
                     "kv-aware routing needs a Kubernetes GPU pool")
    most = engine.autoscaling.max_replicas if engine.autoscaling else engine.replicas
    if most < 2:
        notes.warn("routing", "kv-aware with one replica: the endpoint picker has no replica to choose between and "
                   "only adds a hop; raise replicas or autoscaling.max_replicas, or use service")
    tiers = [tier for tier in TIERS if any(t.tier == tier for t in spec.tenants)]
    best_effort = spec.tiers.policy("best-effort").priority
    return KvRoutingPlan(
        pool=f"{engine.name}-pool",
        gateway=f"{engine.name}-inference",
        objectives=tuple(ObjectivePlan(name=f"{engine.name}-{tier}", tier=tier,
                                       priority=best_effort - spec.tiers.policy(tier).priority) for tier in tiers),
    )
