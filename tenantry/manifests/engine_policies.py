"""Policies on what engines run and fetch, checked against the Plan."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenantry.manifests.resources import (Resource, pod_spec, pod_templates, quantity_bytes, volume_size,
                                         workloads_by_name)
from tenantry.plan.model import Plan


def engines_match_the_plan(resources: list[Resource], plan: Plan) -> list[str]:
    """GPU requests and vLLM's arguments are exactly what the Plan decided."""
    from tenantry.deploy.model_cache import ADAPTERS_DIR, WEIGHTS_DIR
    from tenantry.configs.vllm import VLLM_SERVE, vllm_args
    from tenantry.deploy.engine import group_stage_args

    violations = []
    deployments = workloads_by_name(resources)
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        kind = "LeaderWorkerSet" if engine.pipeline_parallel > 1 else "Deployment"
        if deployment is None or deployment.kind != kind:
            violations.append(f"engine {engine.name} has no {kind}")
            continue
        if kind == "LeaderWorkerSet":
            violations += _groups_match_the_plan(deployment, engine)
        plain = vllm_args(engine, model=WEIGHTS_DIR, adapter_dir=ADAPTERS_DIR)
        # Across nodes, each pod of a group adds its place in it: the leader's, the workers'.
        stages = list(group_stage_args(engine)) if kind == "LeaderWorkerSet" else [[]]
        for template, stage in zip(pod_templates(deployment), stages, strict=False):
            vllm = next((c for c in (template.get("spec") or {}).get("containers") or [] if c.get("name") == "vllm"), {})
            expected = [*plain, *stage]
            if vllm.get("args") != expected:
                violations.append(f"{deployment.label} runs vLLM with {vllm.get('args')}, the plan says {expected}")
            if vllm.get("command") != VLLM_SERVE:  # the arguments start with the positional model of `vllm serve`
                violations.append(f"{deployment.label} starts vLLM with {vllm.get('command')}, not {VLLM_SERVE}")
            limits = (vllm.get("resources") or {}).get("limits") or {}
            gpus = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
            wanted = {engine.gpu_resource: str(engine.gpu_resource_count)} if engine.gpu_resource else {}
            if gpus != wanted:
                violations.append(f"{deployment.label} requests {gpus}, the plan says {wanted}")
        # An autoscaled engine's replicas are its ScaledObject's to set: a count in the Deployment would be put back
        # on every update (engines_scale_within_the_plans_bounds checks the bounds).
        wanted_replicas = None if engine.autoscaling else engine.replicas
        if (deployment.props.get("spec") or {}).get("replicas") != wanted_replicas:
            violations.append(f"{deployment.label} has {deployment.props['spec'].get('replicas')} replicas, "
                              f"the plan says {wanted_replicas or 'none (the autoscaler sets them)'}")
    return violations


def _groups_match_the_plan(group: Resource, engine) -> list[str]:
    """A replica across nodes is a group of pipeline_parallel pods, a leader and its workers, recreated whole."""
    template = (group.props.get("spec") or {}).get("leaderWorkerTemplate") or {}
    found = []
    if template.get("size") != engine.pipeline_parallel:
        found.append(f"{group.label} has groups of {template.get('size')} pods, the plan says {engine.pipeline_parallel} "
                     f"(one per pipeline stage)")
    if not (template.get("leaderTemplate") and template.get("workerTemplate")):
        found.append(f"{group.label} lacks a leader or a worker template")
    if template.get("restartPolicy") != "RecreateGroupOnPodRestart":
        found.append(f"{group.label} restarts a pod alone ({template.get('restartPolicy')}): vLLM cannot take a "
                     "stage back into a running engine")
    return found


def engines_scale_within_the_plans_bounds(resources: list[Resource], plan: Plan) -> list[str]:
    """Every autoscaled engine, and only those, has a ScaledObject on its Deployment with the Plan's bounds and
    scale-down window, and triggers that are the engine's signals (the queries and thresholds its alerts use)."""
    from tenantry.deploy.autoscaling import scaled_object_spec

    violations = []
    scaled = {r.metadata.get("name"): r for r in resources if r.kind == "ScaledObject"}
    for engine in plan.engines:
        found = scaled.pop(engine.name, None)
        if engine.autoscaling is None:
            continue
        if found is None:
            violations.append(f"engine {engine.name} autoscales, but no ScaledObject scales it")
            continue
        spec = found.props.get("spec") or {}
        server = next((t.get("metadata", {}).get("serverAddress", "") for t in spec.get("triggers") or []), "")
        expected = scaled_object_spec(plan, engine, server)
        for key in ("scaleTargetRef", "minReplicaCount", "maxReplicaCount", "advanced", "triggers"):
            if spec.get(key) != expected[key]:
                violations.append(f"{found.label} has {key} {spec.get(key)}, the plan says {expected[key]}")
    violations += [f"{r.label} scales {r.metadata.get('name')}, which the plan does not autoscale" for r in scaled.values()]
    return violations


def engine_volumes_hold_their_checkpoint(resources: list[Resource], plan: Plan) -> list[str]:
    """The cache claim an engine reads its weights from holds the checkpoint as
    fetched: the bf16 one when vLLM quantises it while loading."""
    from tenantry.deploy.model_cache import MODELS_DIR
    from tenantry.units import human_bytes

    violations = []
    deployments = workloads_by_name(resources)
    claims = {r.metadata.get("name"): r.props.get("spec") for r in resources if r.kind == "PersistentVolumeClaim"}
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        if deployment is None:
            continue  # engines_match_the_plan names it
        for pod in (t.get("spec") or {} for t in pod_templates(deployment)):  # each stage's pods, across nodes
            vllm = next((c for c in pod.get("containers") or [] if c.get("name") == "vllm"), {})
            mount = next((m.get("name") for m in vllm.get("volumeMounts") or [] if m.get("mountPath") == MODELS_DIR),
                         None)
            volume = next((v for v in pod.get("volumes") or [] if v.get("name") == mount), None)
            size = volume_size(volume, claims) if volume else None
            size_bytes = quantity_bytes(size) if size is not None else None
            if size_bytes is None or size_bytes < engine.pod.download_bytes:
                dtype = "bf16" if engine.quantize_on_load else engine.weights
                violations.append(f"{deployment.label} reads {human_bytes(engine.pod.download_bytes)} of {dtype} "
                                  f"{engine.model} weights from {MODELS_DIR}, "
                                  f"whose volume holds {size or 'no stated size'}")
    return violations


OFFLINE_VALUES = {"1", "ON", "YES", "TRUE"}
"""What huggingface_hub reads as true in HF_HUB_OFFLINE."""


def engines_fetch_nothing_at_start(resources: list[Resource], plan: Plan) -> list[str]:
    """No engine downloads at start: its pods run no init container, keep the Hub offline, mount
    their weights and adapters read-only from claims that a Job the Deployment waits for fills,
    and never load adapters at run time (docs/decisions.md: Weights live in a cache claim filled once)."""
    from tenantry.deploy.model_cache import ADAPTERS_DIR, MODELS_DIR

    violations = []
    deployments = workloads_by_name(resources)
    jobs = [r for r in resources if r.kind == "Job"]
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        if deployment is None:
            continue  # engines_match_the_plan names it
        for pod in (t.get("spec") or {} for t in pod_templates(deployment)):  # each stage's pods, across nodes
            for init in pod.get("initContainers") or []:
                violations.append(f"{deployment.label} runs init container {init.get('name')} before vLLM: "
                                  "engines start from their cache claims and fetch nothing")
            for container in pod.get("containers") or []:
                violations += _container_stays_offline(deployment, container)
            vllm = next((c for c in pod.get("containers") or [] if c.get("name") == "vllm"), {})
            for path in (MODELS_DIR, *([ADAPTERS_DIR] if engine.lora.adapters else [])):
                violations += _mount_from_filled_claim(deployment, pod, vllm, path, jobs)
    return violations


def _container_stays_offline(deployment: Resource, container: dict) -> list[str]:
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    violations = []
    if str(env.get("HF_HUB_OFFLINE", "")).upper() not in OFFLINE_VALUES:
        violations.append(f"{deployment.label} container {container.get('name')} runs without HF_HUB_OFFLINE=1: "
                          "it may download from the Hub at start")
    if str(env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "false")).lower() not in ("false", "0"):
        violations.append(f"{deployment.label} container {container.get('name')} allows loading LoRA adapters "
                          "at run time (VLLM_ALLOW_RUNTIME_LORA_UPDATING)")
    return violations


def _mount_from_filled_claim(deployment: Resource, pod: dict, vllm: dict, path: str, jobs: list[Resource]) -> list[str]:
    mount = next((m for m in vllm.get("volumeMounts") or [] if m.get("mountPath") == path), None)
    volume = next((v for v in pod.get("volumes") or [] if mount and v.get("name") == mount.get("name")), None)
    claim = ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
    if claim is None:
        return [f"{deployment.label} does not mount {path} from a cache claim"]
    violations = []
    if not (mount.get("readOnly") and volume["persistentVolumeClaim"].get("readOnly")):
        violations.append(f"{deployment.label} mounts claim {claim} at {path} writable: replicas only read it")
    fillers = [j for j in jobs if j.namespace == deployment.namespace and any(
        (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
        for v in (pod_spec(j) or {}).get("volumes") or [])]
    if not any(j.urn and j.urn in deployment.dependencies for j in fillers):
        violations.append(f"{deployment.label} mounts claim {claim} at {path}, which no Job it waits for fills")
    return violations


@dataclass(frozen=True)
class GroupNames:
    """What the pinned LeaderWorkerSet controller (v0.10.0) creates for a group, as it names it: with the default
    subdomain policy (Shared) one headless Service named after the group (reconcileHeadlessServices), which its
    leader StatefulSet's pods and every worker StatefulSet take as their subdomain; with UniquePerReplica one per
    replica, named after that replica's leader pod. The leader StatefulSet takes the group's name, each
    replica's worker StatefulSet its leader pod's (`<group>-<replica>`); LWS_LEADER_ADDRESS is
    `<group>-<replica>.<subdomain>.<namespace>` (pkg/utils/pod/pod_utils.go: AddLWSVariables)."""

    group: str
    namespace: str
    shared_subdomain: bool

    def headless_service(self, replica: int) -> str:
        return self.group if self.shared_subdomain else f"{self.group}-{replica}"

    def leader_address(self, replica: int) -> str:
        return f"{self.group}-{replica}.{self.headless_service(replica)}.{self.namespace}"

    def owns(self, kind: str, name: str) -> bool:
        """Whether the controller creates an object of this kind and name, for any number of replicas."""
        per_replica = re.fullmatch(rf"{re.escape(self.group)}-\d+", name) is not None
        if kind == "StatefulSet":
            return name == self.group or per_replica
        if kind == "Service":
            return name == self.group if self.shared_subdomain else per_replica
        return False


def group_names(group: Resource) -> GroupNames:
    policy = ((group.props.get("spec") or {}).get("networkConfig") or {}).get("subdomainPolicy") or "Shared"
    return GroupNames(group.metadata.get("name", ""), group.namespace or "default", policy == "Shared")


def groups_leave_the_controller_its_names(resources: list[Resource]) -> list[str]:
    """No object of tenantry's takes a name the LeaderWorkerSet controller derives for a group: the controller
    creates its headless Service only where none of that name exists, so a Service of ours there would leave
    LWS_LEADER_ADDRESS unresolved, and the group's workers could never reach their leader."""
    found = []
    for group in (r for r in resources if r.kind == "LeaderWorkerSet"):
        names = group_names(group)
        for other in resources:
            if other.namespace == names.namespace and names.owns(other.kind, other.metadata.get("name", "")):
                found.append(f"{other.label} takes a name the LeaderWorkerSet controller derives for group "
                             f"{names.group}: the controller would not create its headless Service, and the leader's "
                             f"address ({names.leader_address(0)}) would not resolve")
    return found
