"""Every shipped stack through the Pulumi program under the mock runtime:
the objects it would apply are valid for the stack's Kubernetes version,
follow tenantry's policies, keep secrets secret, and carry the Plan's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tenantry.manifests.checks import check_rendering, policy_violations
from tenantry.manifests.connectivity import analyse, problems
from tenantry.deploy.common import COMPONENT_LABEL
from tenantry.deploy.engine import api_service_name
from tenantry.configs.node_registration import MIG_CONFIG_LABEL
from tenantry.deploy.gpu_nodes import MIG_PARTED_CONFIGMAP
from tenantry.deploy.model_cache import CACHE_COMPONENT
from tenantry.manifests.offline import Secret, render, write
from tenantry.configs.litellm import POLICY_CALLBACK
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


@pytest.fixture(scope="module", params=STACKS)
def rendered(request):
    plan = plan_stack(request.param)
    return plan, shared_render(request.param)


def by_kind(rendering, kind: str) -> list[dict[str, Any]]:
    return [m for m in rendering.manifests() if m["kind"] == kind]


def named(rendering, kind: str, name: str) -> dict[str, Any]:
    return next(m for m in by_kind(rendering, kind) if m["metadata"]["name"] == name)


def test_every_object_is_valid_and_every_policy_holds(rendered):
    plan, rendering = rendered
    assert check_rendering(rendering, plan) == []


def test_the_connectivity_table_holds_under_the_analyser(rendered):
    """Every flow the platform needs passes and every one it must not allow is denied, as network-config-analyzer
    decides it against the rendered NetworkPolicies (tests/manifests/test_connectivity.py: that it can fail)."""
    plan, rendering = rendered
    verdicts = analyse(plan, rendering.manifests())
    assert problems(verdicts) == []
    assert {v.flow.must_pass for v in verdicts} == {True, False}


def test_keda_is_installed_exactly_where_an_engine_autoscales(rendered):
    plan, rendering = rendered
    scaled = sorted(e.name for e in plan.engines if e.autoscaling)
    assert sorted(m["metadata"]["name"] for m in by_kind(rendering, "ScaledObject")) == scaled
    assert any(r.inputs.get("chart") == "keda" for r in rendering.releases()) == bool(scaled)


def test_components_have_type_tokens_and_own_their_children(rendered):
    _, rendering = rendered
    components = [r for r in rendering.resources if r.type.startswith("tenantry:")]
    assert {r.type for r in components} >= {
        "tenantry:platform:Platform", "tenantry:gpu:GpuNodes", "tenantry:engine:Engine", "tenantry:postgres:Postgres",
        "tenantry:redis:Redis", "tenantry:gateway:Gateway", "tenantry:observability:Observability",
        "tenantry:tenant:Tenant",
    }
    for resource in rendering.resources:
        if resource.type == "tenantry:platform:Platform":
            assert resource.parent_type is None
            continue
        assert resource.parent_type and resource.parent_type.startswith("tenantry:"), resource
        assert resource.name.startswith(f"{resource.parent_name}-"), (resource.name, resource.parent_name)


def _engine_pods(rendering, engine) -> list[dict[str, Any]]:
    """The engine's pod specs: its Deployment's, or across nodes its LeaderWorkerSet's leader's and workers'."""
    if engine.pipeline_parallel > 1:
        group = named(rendering, "LeaderWorkerSet", engine.name)["spec"]["leaderWorkerTemplate"]
        return [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]
    return [named(rendering, "Deployment", engine.name)["spec"]["template"]["spec"]]


def test_engines_carry_the_plans_gpus_and_placement(rendered):
    plan, rendering = rendered
    for engine in plan.engines:
        pods = _engine_pods(rendering, engine)
        for pod in pods:  # across nodes, the leader's (first) and the workers'
            # The nodes' labels only the platform sets (NodeRestriction keeps a kubelet from setting them).
            dedicated = {"node-restriction.kubernetes.io/tenantry-dedicated-to": engine.dedicated_to} if engine.dedicated_nodes else {}
            assert pod["nodeSelector"] == {"node-restriction.kubernetes.io/tenantry-pool": engine.pool, **dedicated}
            assert {"key": "tenantry.io/pool", "operator": "Equal", "value": engine.pool,
                    "effect": "NoSchedule"} in pod["tolerations"]
            vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
            if engine.gpu_resource:
                assert vllm["resources"]["limits"][engine.gpu_resource] == str(engine.gpu_resource_count)
            for flag in ("--scheduling-policy", "--enable-prefix-caching", "--max-num-seqs", "--max-model-len"):
                assert flag in vllm["args"]
            assert vllm["args"][vllm["args"].index("--max-num-seqs") + 1] == str(engine.kv.max_num_seqs)
            shm = next(v for v in pod["volumes"] if v["name"] == "shm")
            assert shm["emptyDir"]["medium"] == "Memory"
            assert vllm["securityContext"]["runAsNonRoot"] and vllm["securityContext"]["capabilities"] == {
                "drop": ["ALL"]}
        vllm = next(c for c in pods[0]["containers"] if c["name"] == "vllm")  # the one serving the API
        assert {p: vllm[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == {
            "startupProbe": "/health", "readinessProbe": "/health", "livenessProbe": "/health"}
        assert named(rendering, "PodDisruptionBudget", engine.name)
        assert named(rendering, "Service", api_service_name(engine))["spec"]["ports"][0]["port"] == 8000
        assert named(rendering, "ServiceMonitor", engine.name)["spec"]["endpoints"][0]["path"] == "/metrics"
        if engine.lora.enabled:
            modules = vllm["args"][vllm["args"].index("--lora-modules") + 1:]
            assert modules == [f"{a.name}=/adapters/{a.name}" for a in engine.lora.adapters]


def test_gateway_config_is_rendered_from_the_plan(rendered):
    plan, rendering = rendered
    config_map = named(rendering, "ConfigMap", "tenantry-gateway")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    served = {m["model_name"]: m for m in config["model_list"]}
    for engine in plan.engines:
        for name in (engine.name, *(a.name for a in engine.lora.adapters)):
            params = served[name]["litellm_params"]
            # A kv-aware engine is called through its inference Gateway's Service, which Istio names <gateway>-istio.
            host = f"{engine.routing.gateway}-istio" if engine.routing else api_service_name(engine)
            port = 80 if engine.routing else 8000
            assert params["api_base"] == f"http://{host}.{plan.platform.namespace}.svc:{port}/v1"
            assert params["input_cost_per_token"] == pytest.approx(engine.tokens.usd_per_1k_input_tokens / 1000)
            assert params["output_cost_per_token"] == pytest.approx(engine.tokens.usd_per_1k_output_tokens / 1000)
    assert config["router_settings"]["fallbacks"] == [{m: list(f.to)} for f in plan.gateway.fallbacks
                                                      for m in (f.model, *f.adapters)]
    assert config["litellm_settings"]["callbacks"] == ["prometheus", POLICY_CALLBACK]
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    assert "tenant_policy.py" in config_map["data"]
    policy = json.loads(config_map["data"]["tenant-policy.json"])
    assert {t: s["priority"] for t, s in policy["tenants"].items()} == {t.name: t.priority for t in plan.tenants}
    gateway = named(rendering, "Deployment", "tenantry-gateway")
    assert gateway["spec"]["replicas"] == plan.gateway.replicas
    hpa = named(rendering, "HorizontalPodAutoscaler", "tenantry-gateway")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (plan.gateway.replicas, plan.gateway.max_replicas)
    monitor = named(rendering, "ServiceMonitor", "tenantry-gateway")
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"] == "tenantry-gateway-master-key"


def test_reconciler_job_carries_every_tenant_and_reruns_when_they_change(rendered):
    plan, rendering = rendered
    teams = json.loads(named(rendering, "ConfigMap", "tenantry-reconciler")["data"]["teams.json"])
    assert {t["team_alias"]: t["tpm_limit"] for t in teams} == {t.name: t.tpm for t in plan.tenants}
    jobs = [j for j in by_kind(rendering, "Job") if j["metadata"]["labels"][COMPONENT_LABEL] != CACHE_COMPONENT]
    assert len(jobs) == 1 and jobs[0]["metadata"]["name"].startswith("tenantry-reconcile-")
    cronjob = named(rendering, "CronJob", "tenantry-reconcile")
    assert cronjob["spec"]["schedule"] == "*/15 * * * *"
    # Both kinds of run answer the runbook's selector, and ReconcilerJobFailed matches the one-shot Job's name.
    assert cronjob["spec"]["jobTemplate"]["metadata"]["labels"] == jobs[0]["metadata"]["labels"]
    assert re.fullmatch(r"tenantry-reconcile-[0-9a-f]{10}", jobs[0]["metadata"]["name"])
    keys = named(rendering, "Secret", "tenantry-tenant-keys")
    assert isinstance(keys["stringData"], Secret)


def test_tenant_namespaces(rendered):
    plan, rendering = rendered
    for tenant in plan.tenants:
        namespace = named(rendering, "Namespace", tenant.namespace)
        assert namespace["metadata"]["labels"]["tenantry.io/tenant"] == tenant.name
        assert namespace["metadata"]["labels"]["tenantry.io/tier"] == tenant.tier
        quota = next(m for m in by_kind(rendering, "ResourceQuota") if m["metadata"]["namespace"] == tenant.namespace)
        gpu_quota = {k: v for k, v in quota["spec"]["hard"].items() if k.startswith("requests.nvidia.com/")}
        assert gpu_quota == {f"requests.{r}": "0" for r in tenant.quota_gpu_resources}
        # Whatever an engine of the stack runs on, a tenant's pod may not request it.
        assert {f"requests.{e.gpu_resource}" for e in plan.engines if e.gpu_resource} <= gpu_quota.keys()
        assert "requests.nvidia.com/gpu" in gpu_quota
        assert quota["spec"]["hard"]["pods"] == str(tenant.quota_pods)
        egress = next(m for m in by_kind(rendering, "NetworkPolicy")
                      if m["metadata"]["namespace"] == tenant.namespace and m["spec"].get("egress"))
        ports = sorted(p["port"] for rule in egress["spec"]["egress"] for p in rule["ports"])
        assert ports == [53, 53, 4000]
        key = next(m for m in by_kind(rendering, "Secret") if m["metadata"]["namespace"] == tenant.namespace)
        assert key["metadata"]["name"] == "tenantry-gateway-key" and isinstance(key["stringData"], Secret)
        binding = next(m for m in by_kind(rendering, "RoleBinding") if m["metadata"]["namespace"] == tenant.namespace)
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                        "name": f"system:serviceaccounts:{tenant.namespace}"}]
        # a ClusterRole, granted by the RoleBinding in the tenant's namespace only
        role = named(rendering, "ClusterRole", binding["roleRef"]["name"])
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tenantry-gateway-key"],
                                  "verbs": ["get"]}]


def test_gpu_nodes_and_the_operator(rendered):
    plan, rendering = rendered
    nodes = {m["metadata"]["name"]: m for m in by_kind(rendering, "Node")}
    for pool in plan.pools:
        for node in pool.node_names or ():
            labels = nodes[node]["metadata"]["labels"]
            assert labels["node-restriction.kubernetes.io/tenantry-pool"] == pool.name
            assert labels[MIG_CONFIG_LABEL] == (pool.mig_config or "all-disabled")
            # The taint comes from the node's registration (docs/decisions.md: Node taints come from registration,
            # labels from NodePatch).
            assert "spec" not in nodes[node]
    operator = [r for r in rendering.releases() if r.inputs["chart"] == "gpu-operator"]
    if all(p.gpu == "CPU" for p in plan.pools):
        assert operator == []
        return
    values = operator[0].inputs["values"]
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert values["mig"]["strategy"] == ("mixed" if plan.mig_strategy == "mixed" else "none")
    if plan.mig_strategy == "mixed":
        assert values["migManager"]["config"]["name"] == MIG_PARTED_CONFIGMAP
        parted = yaml.safe_load(named(rendering, "ConfigMap", MIG_PARTED_CONFIGMAP)["data"]["config.yaml"])
        for pool in plan.pools:
            if pool.mig_layout:
                devices = parted["mig-configs"][pool.mig_config][0]["mig-devices"]
                assert sum(devices.values()) == len(pool.mig_layout)


def test_no_secret_value_appears_in_plain_text(rendered):
    """Mock passwords are distinct strings; none may be found outside a value
    Pulumi marks secret, in any object or in the stack's outputs."""
    _, rendering = rendered

    def plain_strings(value: Any):
        if isinstance(value, Secret):
            return
        if isinstance(value, dict):
            for v in value.values():
                yield from plain_strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from plain_strings(v)
        elif isinstance(value, str):
            yield value

    leaks = [(r.name, s) for r in rendering.resources for s in plain_strings(r.inputs) if "mock-secret-" in s]
    assert leaks == []
    assert "mock-secret-" not in json.dumps(rendering.exports)
    assert rendering.exports["gateway_url"].endswith(":4000")


def test_stateful_resources_keep_their_names():
    """Renaming any of these would delete data (Pulumi replaces renamed resources):
    change them only with an alias."""
    rendering = shared_render("h100x8-shared-70b")
    stateful = {(r.type.rsplit(":", 1)[-1], r.name, (r.inputs.get("metadata") or {}).get("name"))
                for r in rendering.resources if r.type.rsplit(":", 1)[-1] in ("Cluster", "RandomPassword")}
    assert stateful == {
        ("Cluster", "tenantry-postgres-cluster", "tenantry-postgres"),
        ("RandomPassword", "tenantry-postgres-password", None),
        ("RandomPassword", "tenantry-redis-password", None),
        ("RandomPassword", "tenantry-gateway-master-key", None),
        *{("RandomPassword", f"tenantry-key-{t}", None) for t in
          ("support-chat", "legal-rag", "code-agent", "extraction-batch", "research")},
    }


def test_rendering_is_deterministic(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    write(render(stack_path("h100-mig-mixed")), first)
    write(render(stack_path("h100-mig-mixed")), second)
    files = sorted(p.relative_to(first) for p in first.rglob("*.yaml"))
    assert files == sorted(p.relative_to(second) for p in second.rglob("*.yaml"))
    assert all((first / f).read_text() == (second / f).read_text() for f in files)
    assert "<pulumi secret>" in (first / "tenantry" / "Secret-tenantry-gateway-env.yaml").read_text()


def test_policies_pass_on_every_stack(rendered):
    plan, rendering = rendered
    assert policy_violations(rendering, plan) == []


def test_engines_are_scraped_often_enough_for_admission_to_read_a_fresh_sample(rendered):
    # Admission on Kubernetes reads what Prometheus scraped, and judges a sample by its own
    # timestamp: a scrape interval at or beyond metrics_max_age_seconds would make the
    # engine's state unknown for part of every interval (spot refused, best-effort capped).
    plan, rendering = rendered
    engine_names = {e.name for e in plan.engines}
    monitors = [m for m in by_kind(rendering, "ServiceMonitor") if m["metadata"]["name"] in engine_names]
    assert len(monitors) == len(engine_names)
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["interval"] == f"{plan.gateway.engine_scrape_interval_seconds}s"
        assert plan.gateway.engine_scrape_interval_seconds <= plan.gateway.metrics_max_age_seconds / 2
