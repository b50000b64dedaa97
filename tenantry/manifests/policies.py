"""tenantry's deployment policies as pure functions over the resources a
program registers. The policy pack under policy/ runs them during
`pulumi preview --policy-pack policy`; `tenantry manifests` and the tests run
them over the mock rendering of every stack (docs/decisions.md: Policies are
written once). Each violation names the resource it is about.

A resource is (type token, logical name, properties), and where known its
URN, its parent's URN and the URNs it depends on; secret values are
`tenantry.manifests.offline.Secret` markers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tenantry.manifests.offline import Secret
from tenantry.pins import IMAGES, chart
from tenantry.plan.model import Plan

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "ReplicaSet"}
ENGINE_SELECTOR_KEY = "tenantry.io/engine"
TENANT_LABEL = "tenantry.io/tenant"


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    props: dict[str, Any]
    urn: str = ""
    parent: str | None = None
    dependencies: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.props.get("metadata") or {}

    @property
    def namespace(self) -> str | None:
        return self.metadata.get("namespace")

    @property
    def label(self) -> str:
        meta = self.metadata
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        return f"{self.kind} {where}{meta.get('name', self.name)}"


def from_policy_props(value: Any) -> Any:
    """Properties as pulumi-policy hands them over (behind proxies that hide
    which values are secret) turned into plain values with Secret markers."""
    from pulumi_policy.secret import Secret as PolicySecret

    if hasattr(value, "__getitem__") and not isinstance(value, (str, bytes, list, dict)):
        try:
            value = value["__target"]
        except (KeyError, TypeError, IndexError):
            pass
    if isinstance(value, PolicySecret):
        return Secret(from_policy_props(value.value))
    if isinstance(value, dict):
        return {k: from_policy_props(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_policy_props(v) for v in value]
    return value


# --- helpers ---------------------------------------------------------------------------------


def pod_spec(resource: Resource) -> dict[str, Any] | None:
    spec = resource.props.get("spec") or {}
    if resource.kind == "Pod":
        return spec
    if resource.kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    if resource.kind in WORKLOAD_KINDS:
        return (spec.get("template") or {}).get("spec")
    return None


def containers(resource: Resource) -> Iterator[dict[str, Any]]:
    spec = pod_spec(resource) or {}
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def _pod_labels(resource: Resource) -> dict[str, str]:
    spec = resource.props.get("spec") or {}
    return ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}


def _selects(selector: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels") or {}
    return not selector.get("matchExpressions") and all(pod_labels.get(k) == v for k, v in wanted.items())


def _contains_secret(value: Any) -> bool:
    if isinstance(value, Secret):
        return True
    if isinstance(value, dict):
        return any(_contains_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_secret(v) for v in value)
    return False


# --- policies --------------------------------------------------------------------------------


def tenant_namespaces_are_isolated(resources: list[Resource]) -> list[str]:
    """Every tenant namespace has a ResourceQuota, a LimitRange and a default-deny NetworkPolicy."""
    violations = []
    tenants = [r for r in resources if r.kind == "Namespace" and TENANT_LABEL in (r.metadata.get("labels") or {})]
    for namespace in tenants:
        ns = namespace.metadata["name"]
        inside = [r for r in resources if r.namespace == ns]
        if not any(r.kind == "ResourceQuota" for r in inside):
            violations.append(f"tenant namespace {ns} has no ResourceQuota")
        if not any(r.kind == "LimitRange" for r in inside):
            violations.append(f"tenant namespace {ns} has no LimitRange")
        deny = [
            r for r in inside if r.kind == "NetworkPolicy"
            and (r.props.get("spec") or {}).get("podSelector") in ({}, None)
            and set((r.props.get("spec") or {}).get("policyTypes") or []) == {"Ingress", "Egress"}
            and not (r.props.get("spec") or {}).get("ingress") and not (r.props.get("spec") or {}).get("egress")
        ]
        if not deny:
            violations.append(f"tenant namespace {ns} has no default-deny NetworkPolicy (ingress and egress)")
    return violations


def engines_reachable_only_from_gateway(resources: list[Resource], gateway_selector: dict[str, str],
                                        monitoring_namespace: str) -> list[str]:
    """Every engine's pods are selected by an ingress NetworkPolicy, and every
    policy selecting them admits only the gateway's pods (same namespace) and
    Prometheus; no engine Service leaves the cluster network."""
    violations = []
    engines = [r for r in resources if r.kind == "Deployment" and ENGINE_SELECTOR_KEY in _pod_labels(r)]
    policies = [r for r in resources if r.kind == "NetworkPolicy"]
    for engine in engines:
        pod_labels = _pod_labels(engine)
        guarding = [p for p in policies if p.namespace == engine.namespace
                    and _selects((p.props.get("spec") or {}).get("podSelector") or {}, pod_labels)
                    and "Ingress" in ((p.props.get("spec") or {}).get("policyTypes") or [])]
        if not guarding:
            violations.append(f"engine {engine.label} has no NetworkPolicy guarding its ingress")
        for policy in guarding:
            for rule in (policy.props.get("spec") or {}).get("ingress") or []:
                peers = rule.get("from")
                if not peers:
                    violations.append(f"engine {engine.label} is reachable from anywhere through {policy.label}")
                for peer in peers or []:
                    if not _allowed_engine_peer(peer, gateway_selector, monitoring_namespace):
                        violations.append(f"engine {engine.label} is reachable from {peer} through {policy.label}")
    for service in (r for r in resources if r.kind == "Service"):
        selector = (service.props.get("spec") or {}).get("selector") or {}
        if ENGINE_SELECTOR_KEY in selector and (service.props.get("spec") or {}).get("type") in ("NodePort", "LoadBalancer"):
            violations.append(f"engine {service.label} is exposed outside the cluster")
    return violations


def _allowed_engine_peer(peer: dict[str, Any], gateway_selector: dict[str, str], monitoring_namespace: str) -> bool:
    pods = (peer.get("podSelector") or {}).get("matchLabels") or {}
    namespaces = peer.get("namespaceSelector")
    if "ipBlock" in peer:
        return False
    if namespaces is None:
        return pods == gateway_selector  # the gateway, in the engines' own namespace
    ns_labels = namespaces.get("matchLabels") or {}
    return (ns_labels == {"kubernetes.io/metadata.name": monitoring_namespace} and not namespaces.get("matchExpressions")
            and pods == {"app.kubernetes.io/name": "prometheus"})


def containers_have_requests_and_limits(resources: list[Resource]) -> list[str]:
    violations = []
    for resource in resources:
        for container in containers(resource):
            res = container.get("resources") or {}
            for bound in ("requests", "limits"):
                missing = [k for k in ("cpu", "memory") if k not in (res.get(bound) or {})]
                if missing:
                    violations.append(f"{resource.label} container {container.get('name')} has no {bound} for "
                                      f"{', '.join(missing)}")
    return violations


def versions_are_pinned(resources: list[Resource]) -> list[str]:
    """Every image is one tenantry.pins names (a fixed tag, never latest);
    every Helm release is the chart version pinned under charts/."""
    violations = []
    pinned_images = set(IMAGES.values())
    for resource in resources:
        for container in containers(resource):
            image = container.get("image", "")
            if image not in pinned_images:
                violations.append(f"{resource.label} container {container.get('name')} runs {image!r}, "
                                  "which tenantry.pins does not pin")
            if image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]:
                violations.append(f"{resource.label} container {container.get('name')} image {image!r} has no fixed tag")
        if resource.kind == "Release":
            name = resource.props.get("chart")
            try:
                pin = chart(str(name))
            except FileNotFoundError:
                violations.append(f"Helm release {resource.name} installs chart {name!r}, which charts/ does not pin")
                continue
            if resource.props.get("version") != pin.version or (resource.props.get("repositoryOpts") or {}).get("repo") != pin.repository:
                violations.append(f"Helm release {resource.name} is not chart {pin.chart} {pin.version} from {pin.repository}")
    return violations


def no_secret_in_plain_text(resources: list[Resource]) -> list[str]:
    """No secret value in a ConfigMap, in a container's literal environment, or
    in a Helm release's values."""
    violations = []
    for resource in resources:
        if resource.kind == "ConfigMap" and _contains_secret(resource.props.get("data")):
            violations.append(f"{resource.label} holds a secret value; use a Secret")
        if resource.kind == "Release" and _contains_secret(resource.props.get("values")):
            violations.append(f"Helm release {resource.name} has a secret in its values")
        for container in containers(resource):
            for env in container.get("env") or []:
                if _contains_secret(env.get("value")):
                    violations.append(f"{resource.label} container {container.get('name')} has secret {env.get('name')} "
                                      "as a literal environment value; reference a Secret")
    return violations


def tensor_parallel_never_on_mig(resources: list[Resource]) -> list[str]:
    """A replica on a MIG slice runs one GPU's worth of vLLM (tensor parallel 1);
    a replica on whole GPUs requests exactly its tensor-parallel size."""
    violations = []
    for resource in resources:
        for container in containers(resource):
            args = container.get("args") or []
            if "--tensor-parallel-size" not in args:
                continue
            tp = int(args[args.index("--tensor-parallel-size") + 1])
            limits = (container.get("resources") or {}).get("limits") or {}
            mig = {k: v for k, v in limits.items() if k.startswith("nvidia.com/mig-")}
            if mig and (tp != 1 or list(mig.values()) != ["1"]):
                violations.append(f"{resource.label} runs tensor parallel {tp} on MIG slices {mig}")
            whole = limits.get("nvidia.com/gpu")
            if whole is not None and int(whole) != tp:
                violations.append(f"{resource.label} requests {whole} GPUs for tensor parallel {tp}")
    return violations


CRD_CHARTS = {
    "monitoring.coreos.com": "kube-prometheus-stack",
    "postgresql.cnpg.io": "cloudnative-pg",
    "nvidia.com": "gpu-operator",
    "nfd.k8s-sigs.io": "gpu-operator",  # its node-feature-discovery subchart
}
"""The API groups of custom resources, each with the pinned chart (charts/<name>) whose CRDs define it."""
BUILT_IN_GROUPS = frozenset({
    "core", "apps", "batch", "policy", "autoscaling", "admissionregistration.k8s.io", "apiextensions.k8s.io",
    "apiregistration.k8s.io", "certificates.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "flowcontrol.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io", "rbac.authorization.k8s.io",
    "resource.k8s.io", "scheduling.k8s.io", "storage.k8s.io",
    "helm.sh", "yaml", "kustomize",  # pulumi-kubernetes' own kinds: they install objects, they are not one
})


def _api_group(resource: Resource) -> str | None:
    if not resource.type.startswith("kubernetes:"):
        return None
    return resource.type.split(":")[1].split("/")[0]


def _created_before(resource: Resource, by_urn: dict[str, Resource]) -> Iterator[Resource]:
    """Everything Pulumi creates before `resource`: its dependencies and its
    parent, transitively (a child is registered once its parent is, and the
    parent once its own dependencies exist)."""
    seen: set[str] = set()
    queue = [resource]
    while queue:
        current = queue.pop()
        for urn in (*current.dependencies, *([current.parent] if current.parent else [])):
            if urn not in seen and urn in by_urn:
                seen.add(urn)
                queue.append(by_urn[urn])
                yield by_urn[urn]


def custom_resources_wait_for_their_crds(resources: list[Resource]) -> list[str]:
    """Every object of a kind Kubernetes does not build in depends, directly or
    transitively, on the Helm release of the pinned chart that installs its CRD:
    on a fresh cluster the kind does not exist before it ("no matches for kind")."""
    violations = []
    by_urn = {r.urn: r for r in resources if r.urn}
    for resource in resources:
        group = _api_group(resource)
        if group is None or group in BUILT_IN_GROUPS:
            continue
        if group not in CRD_CHARTS:
            violations.append(f"{resource.label} is a {group} custom resource that no pinned chart is known to define")
            continue
        wanted = chart(CRD_CHARTS[group]).chart
        if not any(r.kind == "Release" and r.props.get("chart") == wanted for r in _created_before(resource, by_urn)):
            violations.append(f"{resource.label} does not depend on the Helm release of {wanted}, which installs its CRD")
    return violations


def engines_match_the_plan(resources: list[Resource], plan: Plan) -> list[str]:
    """GPU requests and vLLM's arguments are exactly what the Plan decided."""
    from tenantry.deploy.engine import ADAPTERS_DIR, MODELS_DIR
    from tenantry.configs.vllm import model_reference, vllm_args

    violations = []
    deployments = {r.metadata.get("name"): r for r in resources if r.kind == "Deployment"}
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        if deployment is None:
            violations.append(f"engine {engine.name} has no Deployment")
            continue
        vllm = next((c for c in containers(deployment) if c.get("name") == "vllm"), {})
        hub = engine.source.startswith("hf://")
        expected = vllm_args(engine, model=model_reference(engine, f"{MODELS_DIR}/weights"), adapter_dir=ADAPTERS_DIR,
                             download_dir=MODELS_DIR if hub else None)
        if vllm.get("args") != expected:
            violations.append(f"{deployment.label} runs vLLM with {vllm.get('args')}, the plan says {expected}")
        limits = (vllm.get("resources") or {}).get("limits") or {}
        gpus = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
        wanted = {engine.gpu_resource: str(engine.gpu_resource_count)} if engine.gpu_resource else {}
        if gpus != wanted:
            violations.append(f"{deployment.label} requests {gpus}, the plan says {wanted}")
        if (deployment.props.get("spec") or {}).get("replicas") != engine.replicas:
            violations.append(f"{deployment.label} has {deployment.props['spec'].get('replicas')} replicas, "
                              f"the plan says {engine.replicas}")
    return violations


_QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                   "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def _quantity_bytes(value: Any) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]i|[kMGTP])?", str(value))
    return float(match[1]) * _QUANTITY_UNITS[match[2] or ""] if match else None


def _volume_size(volume: dict[str, Any], claims: dict[str, Any]) -> Any:
    """An emptyDir's sizeLimit, or the storage its claim (ephemeral template or a rendered PVC) requests."""
    if "emptyDir" in volume:
        return (volume["emptyDir"] or {}).get("sizeLimit")
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    spec = claims.get(claim) if claim else ((volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}).get("spec")
    return (((spec or {}).get("resources") or {}).get("requests") or {}).get("storage")


def engine_volumes_hold_their_checkpoint(resources: list[Resource], plan: Plan) -> list[str]:
    """The volume an engine downloads its weights into holds the checkpoint as
    downloaded: the bf16 one when vLLM quantises it while loading."""
    from tenantry.deploy.engine import MODELS_DIR
    from tenantry.units import human_bytes

    violations = []
    deployments = {r.metadata.get("name"): r for r in resources if r.kind == "Deployment"}
    claims = {r.metadata.get("name"): r.props.get("spec") for r in resources if r.kind == "PersistentVolumeClaim"}
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        if deployment is None:
            continue  # engines_match_the_plan names it
        vllm = next((c for c in containers(deployment) if c.get("name") == "vllm"), {})
        mount = next((m.get("name") for m in vllm.get("volumeMounts") or [] if m.get("mountPath") == MODELS_DIR), None)
        volume = next((v for v in (pod_spec(deployment) or {}).get("volumes") or [] if v.get("name") == mount), None)
        size = _volume_size(volume, claims) if volume else None
        size_bytes = _quantity_bytes(size) if size is not None else None
        if size_bytes is None or size_bytes < engine.pod.download_bytes:
            dtype = "bf16" if engine.quantize_on_load else engine.weights
            violations.append(f"{deployment.label} downloads {human_bytes(engine.pod.download_bytes)} of {dtype} "
                              f"{engine.model} weights into {MODELS_DIR}, whose volume holds {size or 'no stated size'}")
    return violations

