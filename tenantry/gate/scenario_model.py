"""What a gate scenario is: stages of loads, each perhaps starting with a fault on the stack
(tenantry/gate/scenarios.py builds them from the Plan; the Locust run and the verdict read them)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Load:
    users: int
    """Concurrent users; each has at most one request in flight."""
    rate: float
    """The tenant's offered requests per second over all its users; 0: back to back."""
    engines: tuple[str, ...] = ()
    """Only its traffic to these engines, each target in proportion to its share (empty: all its traffic)."""

    def weights(self, targets) -> list[float]:
        """Each of these targets' (TrafficPlan) share of the load's requests: 0 on an engine it leaves out."""
        return [t.share if not self.engines or t.engine in self.engines else 0.0 for t in targets]

    def of_class(self, class_targets, tenant_traffic) -> tuple[int, float]:
        """(users of one traffic class of the tenant, seconds between one user's requests; 0 back to back):
        the class's part of the load is its targets' share of the traffic this load sends."""
        share = sum(self.weights(class_targets)) / sum(self.weights(tenant_traffic))
        if not share:
            return 0, 0.0
        users = max(1, round(self.users * share))
        return users, (users / (self.rate * share) if self.rate else 0.0)


FAULTS = ("stop-engine", "kill-engine", "kill-gateway", "stop-postgres", "stop-redis", "exhaust-budget")
"""What a stage can do to the stack as it starts. A target runs each with its own command
(tenantry/gate/target.py, Target.fault_commands); a fault in RESTORES is undone by the command named
there after the fault's seconds."""
RESTORES = {"stop-postgres": "start-postgres", "stop-redis": "start-redis", "exhaust-budget": "restore-budget"}
MID_STREAM_WAIT_SECONDS = 20.0
"""The longest a mid-stream fault waits for a stream under way before it is done anyway."""
MID_STREAM_OUTPUT_SCALE = 24.0
"""A mid-stream fault's scenario asks for answers this many times the typical length, so that a
stream just started is still under way when the fault lands: the local stack's 48-token answers
took under a second, and a kill through supervisorctl took up to 16 s under the gate's load (1,152
tokens take 12 to 20 s there)."""


@dataclass(frozen=True)
class Fault:
    kind: str
    subject: str = ""
    """The engine (stop-engine, kill-engine), the gateway replica's index (kill-gateway) or the tenant
    (exhaust-budget)."""
    seconds: float | None = None
    """How long before it is undone (RESTORES); None: the platform brings it back
    (a killed process is restarted by its supervisor), or the gate after the run (a stopped engine)."""
    mid_stream: bool = False
    """Wait, at most MID_STREAM_WAIT_SECONDS, until the gate's own stream to the subject engine has had
    its first token, and keep one under way until the fault's command has returned, so that the fault
    cuts one rather than whatever chance has in flight."""

    @property
    def restore(self) -> str | None:
        return RESTORES.get(self.kind) if self.seconds is not None else None

    def describe(self) -> str:
        what = f"{self.kind} {self.subject}".strip()
        return f"{what} for {self.seconds:g} s" if self.seconds is not None else what


@dataclass(frozen=True)
class Stage:
    name: str
    seconds: float
    loads: dict[str, Load]
    fault: Fault | None = None
    """Done to the stack as the stage starts."""


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    stages: tuple[Stage, ...]
    checks: tuple[str, ...] = ()
    """Scenario checks beyond each tenant's SLO (verdict.CHECKS)."""
    ratio_checks: tuple[str, ...] = ()
    """Checks of latency as a ratio within the run, judged where absolute latency is reported, not judged
    (latency_judged)."""
    not_judged: tuple[str, ...] = ()
    """Tenants pushed beyond their contract on purpose: reported, not held to their SLO."""
    stream_all: bool = False
    """Stream every request, batch ones too, so that first tokens are timed exactly."""
    output_scale: float = 1.0
    """Every answer this many times its tenant's typical length (within its cap)."""
    output_scales: dict[str, float] = field(default_factory=dict)
    """Per tenant, instead of output_scale."""
    cache_probes: tuple[tuple[str, str, str], ...] = ()
    """(first tenant, second tenant, model): the same fresh prompt from one, then the other."""
    repeat_prompts: bool = False
    """Send the same prompts as every earlier run (warm: engines still hold them in their prefix caches)
    instead of prompts drawn afresh for this run (cold, the default: only what the run itself shares, such
    as a tenant's RAG document, can be cached) (docs/decisions.md: Each gate run draws its own prompts)."""
    latency_judged: bool = True
    """Whether each tenant's latency is held to its SLO's absolute targets (`tenantry gate --latency judged`, the
    default), or only reported beside them (`--latency reported`): what CI on a shared machine does, where it
    judges who was served, shed and refused, and latency only as a ratio within the run (docs/decisions.md:
    CI judges what a shared machine can judge)."""
    subject: dict[str, str] = field(default_factory=dict)
    """The tenants and engines a scenario is about (aggressor, victim, engine, ...)."""
    fault_times: dict[str, tuple[float, float]] = field(default_factory=dict)
    """For each kind of fault, when its command started and when it returned (the fault was in effect
    by then), in seconds into the run, as the run recorded them; empty as built (a mid-stream fault
    starts after its stage does, and a command under load takes seconds)."""

    def output_scale_of(self, tenant: str) -> float:
        return self.output_scales.get(tenant, self.output_scale)

    @property
    def seconds(self) -> float:
        return sum(stage.seconds for stage in self.stages)

    def fault_at(self, kind: str) -> tuple[Fault, float] | None:
        """The first fault of this kind and when it was done (seconds into the run): as recorded by
        the run, or else as its stage starts."""
        start = 0.0
        for stage in self.stages:
            if stage.fault and stage.fault.kind == kind:
                return stage.fault, self.fault_times.get(kind, (start, start))[0]
            start += stage.seconds
        return None

    def fault_done(self, kind: str) -> float | None:
        """When the fault's command returned, as recorded by the run, or else when it started."""
        found = self.fault_at(kind)
        return None if found is None else self.fault_times.get(kind, (found[1], found[1]))[1]

    def fault_undone(self, kind: str) -> tuple[float, float] | None:
        """When the command undoing the fault (its restore) started and returned, as recorded by the run, or else
        when its seconds ran out from its start (the gate undoes it then: a command under load may start late)."""
        found = self.fault_at(kind)
        if found is None or found[0].restore is None:
            return None
        fault, at = found
        return self.fault_times.get(fault.restore, (at + fault.seconds, at + fault.seconds))

    def stage_at(self, elapsed: float) -> Stage | None:
        for stage in self.stages:
            if elapsed < stage.seconds:
                return stage
            elapsed -= stage.seconds
        return None


def with_stage_seconds(scenario: Scenario, seconds: list[float] | None) -> Scenario:
    """The scenario with its stages lasting `seconds` (None: as built): Locust rebuilds a scenario
    by name and runs it as the gate was given it (benchmarks/gateway_soak.py stretches the flood)."""
    if not seconds:
        return scenario
    if len(seconds) != len(scenario.stages):
        raise ValueError(f"scenario {scenario.name} has {len(scenario.stages)} stages, not {len(seconds)}")
    return replace(scenario, stages=tuple(replace(stage, seconds=float(s))
                                          for stage, s in zip(scenario.stages, seconds, strict=True)))


class ScenarioError(ValueError):
    """The stack has nothing this scenario can exercise (for example, no spot tenant)."""
