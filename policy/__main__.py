"""tenantry's policy pack.

    TENANTRY_SPEC=stacks/<stack>.yaml pulumi preview --policy-pack policy

Every policy in tenantry/manifests/*policies.py runs over the whole stack
before anything is applied, and a violation refuses the change; the same
functions run over the offline rendering in `tenantry manifests` and the
tests (docs/decisions.md: Policies are written once). TENANTRY_SPEC names the
stack's spec so that engines can be compared with the Plan.
"""

import os
from typing import Any

from pulumi_policy import EnforcementLevel, PolicyPack, StackValidationArgs, StackValidationPolicy

from tenantry.manifests import bucket_policies, cluster_policies, crd_policies, engine_policies, isolation_policies
from tenantry.manifests import policies as rules
from tenantry.manifests import routing_policies
from tenantry.manifests.resources import Resource, from_policy_props
from tenantry.deploy.gateway import PORT as GATEWAY_PORT, SELECTOR as GATEWAY_SELECTOR
from tenantry.pins import chart
from tenantry.stacks import plan_stack


def _resources(args: StackValidationArgs) -> list[Resource]:
    return [Resource(r.resource_type, r.name, from_policy_props(r.props), r.urn,
                           r.parent.urn if r.parent else None, tuple(d.urn for d in r.dependencies))
            for r in args.resources]


def _stack_rule(name: str, description: str, check: Any) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: Any) -> None:
        for violation in check(_resources(args)):
            report_violation(violation)

    return StackValidationPolicy(name=name, description=description, validate=validate,
                                 enforcement_level=EnforcementLevel.MANDATORY)


def _against_the_plan(check: Any) -> Any:
    def run(resources: list[Resource]) -> list[str]:
        spec = os.environ.get("TENANTRY_SPEC")
        if not spec:
            return ["set TENANTRY_SPEC to the stack's spec (stacks/<stack>.yaml) so engines can be checked "
                    "against the plan"]
        return check(resources, plan_stack(spec))

    return run


PolicyPack(
    name="tenantry",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[
        _stack_rule("tenant-namespaces-isolated", "Every tenant namespace has a quota, a limit range and a "
                    "default-deny network policy; its pods are reached by nothing and reach only DNS and the gateway.",
                    lambda rs: rules.tenant_namespaces_are_isolated(rs, GATEWAY_SELECTOR, GATEWAY_PORT)),
        _stack_rule("engines-only-from-gateway", "No engine is reachable except from the gateway and Prometheus (and, "
                    "kv-aware, its own Gateway's and endpoint picker's pods).",
                    lambda rs: rules.engines_reachable_only_from_gateway(
                        rs, GATEWAY_SELECTOR, chart("kube-prometheus-stack").namespace)),
        _stack_rule("nothing-public", "No Service, rendered or created by Istio for a Gateway, is a NodePort or "
                    "LoadBalancer: the spec has no external entry.", rules.nothing_is_public),
        _stack_rule("requests-and-limits", "Every container has CPU and memory requests and limits.",
                    rules.containers_have_requests_and_limits),
        _stack_rule("versions-pinned", "Every image and chart version is pinned in tenantry.pins.",
                    rules.versions_are_pinned),
        _stack_rule("no-plain-secrets", "No secret value in a ConfigMap, an environment literal or Helm values.",
                    rules.no_secret_in_plain_text),
        _stack_rule("tp-never-on-mig", "Tensor-parallel engines never run on MIG slices.",
                    rules.tensor_parallel_never_on_mig),
        _stack_rule("engines-match-plan", "GPU requests and vLLM arguments equal the Plan.",
                    _against_the_plan(engine_policies.engines_match_the_plan)),
        _stack_rule("engines-scale-within-plan", "Each autoscaled engine, and only those, has a ScaledObject with the "
                    "Plan's bounds and the signals its alerts fire on.",
                    _against_the_plan(engine_policies.engines_scale_within_the_plans_bounds)),
        _stack_rule("custom-resources-after-crds", "Every custom resource depends on the Helm release that "
                    "installs its CRD, or on the CRD tenantry applies.", crd_policies.custom_resources_wait_for_their_crds),
        _stack_rule("custom-resources-awaited", "pulumi up waits for the PostgreSQL Cluster, each LeaderWorkerSet and "
                    "each Gateway to be ready, and the gateway waits for the database and the Gateways it calls.",
                    crd_policies.custom_resources_are_awaited),
        _stack_rule("chart-crds-upgraded", "A chart whose CRDs Helm would install once and never upgrade has them "
                    "applied by Pulumi (LWS) or upgraded by the chart's own hook (kube-prometheus-stack, GPU Operator).",
                    crd_policies.chart_crds_are_upgraded),
        _stack_rule("engine-volumes-hold-checkpoint", "An engine's weights cache claim holds the checkpoint "
                    "fetched (bf16 when quantised on load).",
                    _against_the_plan(engine_policies.engine_volumes_hold_their_checkpoint)),
        _stack_rule("engines-fetch-nothing-at-start", "Engines run with the Hub offline, without init containers, "
                    "from read-only cache claims a Job they wait for fills; runtime LoRA updating stays off.",
                    _against_the_plan(engine_policies.engines_fetch_nothing_at_start)),
        _stack_rule("groups-leave-controller-names", "No object takes a name the LeaderWorkerSet controller derives "
                    "for a group (its headless Service, StatefulSets), so the leader's address resolves.",
                    engine_policies.groups_leave_the_controller_its_names),
        _stack_rule("bucket-readers-have-identity", "Every pod that reads or writes a bucket runs as the stack's "
                    "declared cloud identity.", _against_the_plan(bucket_policies.bucket_readers_have_an_identity)),
        _stack_rule("node-patches-leave-taints", "NodePatches force their labels and never set the taint list, "
                    "which other managers own.", cluster_policies.node_patches_leave_taints_alone),
        _stack_rule("autoscalers-have-metrics-api", "Autoscalers on CPU or memory wait for the metrics-server "
                    "release, or the cluster serves metrics.k8s.io itself.",
                    _against_the_plan(cluster_policies.autoscalers_have_a_metrics_api)),
        _stack_rule("autoscaler-behaviour-in-range", "Every autoscaler's behaviour (HPA or KEDA ScaledObject) is one "
                    "the API server accepts: windows 0-3600 s, policy periods 1-1800 s.",
                    cluster_policies.autoscaler_behaviour_in_range),
        _stack_rule("service-monitors-find-targets", "Every ServiceMonitor selects a rendered Service by its labels, "
                    "in the namespaces it names, with the port it scrapes.",
                    cluster_policies.service_monitors_find_their_targets),
        _stack_rule("tenants-isolated-as-promised", "Each tenant's isolation level holds in what is applied: the "
                    "gateway lets no other tenant reach its dedicated engines, which carry its label, request MIG "
                    "slices where promised, and run on its own nodes where promised.",
                    _against_the_plan(isolation_policies.tenants_get_the_isolation_they_were_promised)),
        _stack_rule("engines-routed-as-planned", "Each engine is called through its Service, or, kv-aware, through "
                    "its own Gateway, whose route sends to an InferencePool of exactly its serving pods, picked for "
                    "that pool with the Plan's objective per tier.",
                    _against_the_plan(routing_policies.engines_are_routed_as_planned)),
    ],
)
