"""One model deployment: vLLM replicas with the Plan's arguments and GPUs,
reading their weights and adapters from cache claims filled before they
start (model_cache.py) with the Hub offline, a Service, a
PodDisruptionBudget and a ServiceMonitor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import (
    DEDICATED_POD_LABEL,
    ENGINE_LABEL,
    POOL_POD_LABEL,
    TIMEOUT_ANNOTATION,
    cluster_service,
    labels,
    mebibytes,
    pinned_image,
    pod_security,
    resources,
    restricted_container,
    service_monitor,
    spread_across_nodes,
    waits_until,
)
from tenantry.deploy.identity import BucketAccess
from tenantry.deploy.model_cache import (
    ADAPTERS_DIR,
    WEIGHTS_DIR,
    CacheArgs,
    CacheContent,
    engine_caches,
    populate,
)
from tenantry.plan.model import EnginePlan
from tenantry.configs.node_registration import DEDICATED_LABEL, POOL_LABEL, POOL_TAINT_KEY
from tenantry.configs.vllm import ENGINE_ENVIRONMENT, PORT, VLLM_SERVE, stage_args, vllm_args

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""The label LWS gives each pod of a group, its index in it: 0 for the leader (api/leaderworkerset/v1)."""
LWS_READY_CONDITION = "Available"
"""A LeaderWorkerSet's condition once its groups serve (LWS v0.10.0, api/leaderworkerset/v1:
LeaderWorkerSetAvailable)."""
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
"""The variables LWS sets in every container of a group: the leader's address and the pod's index."""
ENGINE_PRIORITY_CLASS = "tenantry-engine"
VLLM_USER = 10001
PROBE_PERIOD_SECONDS = 10
ROLLOUT_MARGIN_SECONDS = 600
"""How long `pulumi up` waits for a rollout beyond one replica's start-up: pulling the image, scheduling
(docs/decisions.md: pulumi up waits as long as the Plan allows)."""


@dataclass(frozen=True)
class EngineArgs:
    engine: EnginePlan
    namespace: str
    image: str
    fetch_image: str
    cache_access_mode: str
    cache_storage_class: str | None
    hub_token: k8s.core.v1.Secret | None
    """The Hub token Secret, mounted only by the Jobs that fetch from the Hub."""
    monitoring_release: pulumi.Resource
    """The Helm release that installs the ServiceMonitor CRD."""
    scrape_interval_seconds: int
    """The Plan's engine scrape interval (admission reads what Prometheus scraped)."""
    bucket_access: BucketAccess | None = None
    """The stack's cloud identity, for the Jobs that fetch from s3:// or gs:// (the replicas fetch nothing)."""
    bucket_account: pulumi.Resource | None = None
    """The service account bucket readers run as: their Jobs wait for it."""
    group_release: pulumi.Resource | None = None
    """The LeaderWorkerSet controller's Helm release (with its CRD): an engine across nodes waits for it."""


def engine_selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", ENGINE_LABEL: name}


def serving_selector(e: EnginePlan) -> dict[str, str]:
    """The labels of the engine's pods that serve the API: every replica's pod, or a group's leader across nodes
    (the workers run headless)."""
    return {**engine_selector(e.name), **({LWS_WORKER_INDEX_LABEL: "0"} if e.pipeline_parallel > 1 else {})}


def api_service_name(e: EnginePlan) -> str:
    """The engine's API Service. Across nodes it is named apart from the group: the pinned LeaderWorkerSet
    controller (v0.10.0, reconcileHeadlessServices) creates a headless Service named after the group, which gives
    its pods the DNS names LWS_LEADER_ADDRESS points at (`<group>-<index>.<group>.<namespace>`), and creates
    nothing where a Service of that name already exists; a ClusterIP Service there leaves the leader's address
    unresolved and the group never forms (manifests/engine_policies.groups_leave_the_controller_its_names)."""
    return f"{e.name}-api" if e.pipeline_parallel > 1 else e.name


def engine_node_selector(e: EnginePlan) -> dict[str, str]:
    """The pool's nodes; on a pool dedicated to the engine's tenant, the nodes labelled for it as well."""
    return {POOL_LABEL: e.pool, **({DEDICATED_LABEL: e.dedicated_to} if e.dedicated_nodes and e.dedicated_to else {})}


class Engine(pulumi.ComponentResource):
    def __init__(self, name: str, args: EngineArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:engine:Engine", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        e, ns = args.engine, args.namespace
        selector = engine_selector(e.name)
        pod_labels = {**labels("engine"), **selector, POOL_POD_LABEL: e.pool,
                      **({DEDICATED_POD_LABEL: e.dedicated_to} if e.dedicated_to else {})}
        caches = engine_caches(e)
        cache_args = CacheArgs(
            namespace=ns, fetch_image=args.fetch_image, hub_image=args.image, access_mode=args.cache_access_mode,
            storage_class=args.cache_storage_class, deadline_seconds=e.pod.populate_seconds, hub_token=args.hub_token,
            bucket_access=args.bucket_access, bucket_account=args.bucket_account,
            node_selector=engine_node_selector(e), tolerations=_tolerations(e),
        )
        jobs = [populate(f"{name}-{c.role}", c, cache_args, self) for c in caches]
        ready_seconds = e.pod.startup_seconds + ROLLOUT_MARGIN_SECONDS
        metadata = {"name": e.name, "namespace": ns, "labels": pod_labels,
                    "annotations": {TIMEOUT_ANNOTATION: str(ready_seconds)}}
        # Replicas start only once every claim they mount is filled: pulumi-kubernetes waits for a Job to complete.
        if e.pipeline_parallel > 1:
            assert args.group_release is not None, "an engine across nodes needs the LeaderWorkerSet controller"
            # A Deployment is awaited by pulumi-kubernetes as it is; a LeaderWorkerSet only with waitFor.
            group_metadata = {**metadata, "annotations": waits_until(LWS_READY_CONDITION, ready_seconds)}
            self.workload: pulumi.Resource = k8s.apiextensions.CustomResource(
                f"{name}-group", api_version=LWS_API_VERSION, kind="LeaderWorkerSet", metadata=group_metadata,
                spec=_group_spec(args, caches, selector, pod_labels),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*jobs, args.group_release]),
            )
            _stages_meet(f"{name}-stages", e.name, ns, selector, pod_labels, child)
        else:
            self.workload = k8s.apps.v1.Deployment(
                f"{name}-deployment", metadata=metadata, spec=_deployment_spec(args, caches, selector, pod_labels),
                opts=pulumi.ResourceOptions(parent=self, depends_on=jobs),
            )
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata={"name": e.name, "namespace": ns, "labels": pod_labels},
            # One replica down at a time, so a drain never takes a whole model away.
            spec={"maxUnavailable": 1, "selector": {"matchLabels": selector}},
            opts=child,
        )
        self.service = cluster_service(f"{name}-service", api_service_name(e), ns, pod_labels, serving_selector(e),
                                       "http", PORT, child)
        service_monitor(f"{name}-monitor", e.name, ns, selector, port="http", path="/metrics", opts=child,
                        crd_release=args.monitoring_release, interval_seconds=args.scrape_interval_seconds)
        self.url = f"http://{api_service_name(e)}.{ns}.svc:{PORT}/v1"
        self.register_outputs({"url": self.url})


def _deployment_spec(
    args: EngineArgs, caches: tuple[CacheContent, ...], selector: dict[str, str], pod_labels: dict[str, str]
) -> dict[str, Any]:
    e = args.engine
    return {
        # An autoscaled engine's count is its ScaledObject's: one set here would be put back on every update.
        **({} if e.autoscaling else {"replicas": e.replicas}),
        "selector": {"matchLabels": selector},
        # No spare GPUs to surge into: replace one replica at a time.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        "template": _pod_template(args, caches, selector, pod_labels, _vllm_container(args, caches)),
    }


def _group_spec(
    args: EngineArgs, caches: tuple[CacheContent, ...], selector: dict[str, str], pod_labels: dict[str, str]
) -> dict[str, Any]:
    """A replica spanning nodes as a LeaderWorkerSet group (LWS v0.10.0, charts/lws): a leader that serves the
    API and runs the first pipeline stage, and pipeline_parallel - 1 workers, one per node. LWS gives every pod
    of a group the leader's address and its own index (LWS_LEADER_ADDRESS, LWS_WORKER_INDEX), which Kubernetes
    puts into the arguments; a pod that restarts takes its whole group with it, as vLLM cannot take a stage
    back into a running engine."""
    e = args.engine
    leader, worker = group_stage_args(e)
    return {
        **({} if e.autoscaling else {"replicas": e.replicas}),
        "startupPolicy": "LeaderCreated",
        # No spare nodes to surge into: one group at a time.
        "rolloutStrategy": {"type": "RollingUpdate",
                            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
        "leaderWorkerTemplate": {
            "size": e.pipeline_parallel,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": _pod_template(args, caches, selector, pod_labels, _vllm_container(args, caches, leader)),
            "workerTemplate": _pod_template(args, caches, selector, pod_labels, _vllm_base(args, caches, worker)),
        },
    }


def group_stage_args(e: EnginePlan) -> tuple[list[str], list[str]]:
    """What the leader's and the workers' vLLM add to vllm_args() (configs/vllm.stage_args): their index in the
    group and the leader's address, as LWS sets them in each container, which Kubernetes expands."""
    leader = f"$({LWS_LEADER_ADDRESS_ENV})"
    return (stage_args(e, rank="0", leader=leader), stage_args(e, rank=f"$({LWS_WORKER_INDEX_ENV})", leader=leader))


def _pod_template(args: EngineArgs, caches: tuple[CacheContent, ...], selector: dict[str, str],
                  pod_labels: dict[str, str], vllm: dict[str, Any]) -> dict[str, Any]:
    e = args.engine
    return {
        "metadata": {"labels": pod_labels},
        "spec": {
            "priorityClassName": ENGINE_PRIORITY_CLASS,
            "automountServiceAccountToken": False,
            "nodeSelector": engine_node_selector(e),
            "tolerations": _tolerations(e),
            "affinity": spread_across_nodes(selector),
            "securityContext": pod_security(VLLM_USER),
            "terminationGracePeriodSeconds": 60,
            "containers": [vllm],
            "volumes": _volumes(args, caches),
        },
    }


def _stages_meet(name: str, engine: str, ns: str, selector: dict[str, str], pod_labels: dict[str, str],
                 opts: pulumi.ResourceOptions) -> None:
    """The pods of an engine across nodes reach each other on every port: torch.distributed's store on the
    leader, and NCCL and vLLM's own messages between the stages on ports they pick at start. Both ways: into a
    stage (nobody else gets in; the platform's engine policy admits the gateway and Prometheus), and out of one,
    which the engines' egress policy (DNS only) would otherwise refuse, and the group would never form."""
    own = [{"podSelector": {"matchLabels": selector}}]
    k8s.networking.v1.NetworkPolicy(
        name,
        metadata={"name": f"{engine}-stages", "namespace": ns, "labels": pod_labels},
        spec={"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress", "Egress"],
              "ingress": [{"from": own}], "egress": [{"to": own}]},
        opts=opts,
    )


def _tolerations(e: EnginePlan) -> list[dict[str, str]]:
    tolerations = [{"key": POOL_TAINT_KEY, "operator": "Equal", "value": e.pool, "effect": "NoSchedule"}]
    if e.gpu_resource:
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _volumes(args: EngineArgs, caches: tuple[CacheContent, ...]) -> list[dict[str, Any]]:
    """The cache claims, read-only: replicas never write their weights, and never fetch them."""
    return [
        *({"name": c.role, "persistentVolumeClaim": {"claimName": c.name, "readOnly": True}} for c in caches),
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": mebibytes(args.engine.pod.shm_bytes)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
    ]


def _vllm_container(args: EngineArgs, caches: tuple[CacheContent, ...],
                    stage: list[str] | None = None) -> dict[str, Any]:
    """vLLM serving the API (`stage`: a multi-node leader's arguments, configs/vllm.stage_args)."""
    e = args.engine
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": PROBE_PERIOD_SECONDS, "timeoutSeconds": 5}
    return {
        **_vllm_base(args, caches, stage or []),
        "ports": [{"name": "http", "containerPort": PORT}],
        # The Plan's startup time, in probe periods rounded up.
        "startupProbe": {**probe, "failureThreshold": -(-e.pod.startup_seconds // PROBE_PERIOD_SECONDS)},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {**probe, "failureThreshold": 6},
    }


def _vllm_base(args: EngineArgs, caches: tuple[CacheContent, ...], stage: list[str]) -> dict[str, Any]:
    """vLLM with the Plan's arguments (and `stage`'s) and GPUs, without an API to probe: as it is, a worker of a
    replica across nodes (its group restarts with its leader, or with it when it dies)."""
    e = args.engine
    gpu_resources = {e.gpu_resource: str(e.gpu_resource_count)} if e.gpu_resource else {}
    return {
        "name": "vllm",
        **pinned_image(args.image),
        "command": VLLM_SERVE,  # (docs/decisions.md: Engines run vllm serve)
        "args": [*vllm_args(e, model=WEIGHTS_DIR, adapter_dir=ADAPTERS_DIR), *stage],
        "env": _vllm_env(),
        "resources": resources(e.pod.cpu, e.pod.memory_bytes, gpu_resources),
        "volumeMounts": [*({"name": c.role, "mountPath": c.mount_path, "readOnly": True} for c in caches),
                         {"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}],
        # vLLM and its kernels cache compiled code under HOME; everything writable is a volume.
        "securityContext": restricted_container(read_only_root=False, user=VLLM_USER),
    }


def _vllm_env() -> list[dict[str, Any]]:
    return [
        {"name": "HOME", "value": "/tmp"},
        {"name": "LOGNAME", "value": "vllm"},  # the image has no passwd entry for a non-root user
        {"name": "HF_HOME", "value": "/tmp/hf"},
        # The weights are a local snapshot: nothing may reach the Hub (huggingface_hub reads either variable).
        {"name": "HF_HUB_OFFLINE", "value": "1"},
        {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
        *({"name": name, "value": value} for name, value in ENGINE_ENVIRONMENT.items()),
    ]
