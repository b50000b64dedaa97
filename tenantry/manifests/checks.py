"""Everything a rendering must pass before anyone applies it: schemas and
tenantry's policies (checkov runs separately: it needs files and its own
environment)."""

from __future__ import annotations

from tenantry.manifests import bucket_policies, cluster_policies, crd_policies, engine_policies, isolation_policies
from tenantry.manifests import routing_policies
from tenantry.manifests import policies as rules
from tenantry.deploy.gateway import PORT as GATEWAY_PORT, SELECTOR as GATEWAY_SELECTOR
from tenantry.manifests.chart_values import chart_values_problems
from tenantry.manifests.offline import Rendering
from tenantry.manifests.resources import Resource
from tenantry.manifests.validate import validate_manifests
from tenantry.pins import chart
from tenantry.plan.model import Plan


def policy_resources(rendering: Rendering) -> list[Resource]:
    return [Resource(r.type, r.name, r.inputs, r.urn, r.parent_urn, r.dependencies) for r in rendering.resources]


def policy_violations(rendering: Rendering, plan: Plan) -> list[str]:
    resources = policy_resources(rendering)
    return [
        *rules.tenant_namespaces_are_isolated(resources, GATEWAY_SELECTOR, GATEWAY_PORT),
        *rules.engines_reachable_only_from_gateway(resources, GATEWAY_SELECTOR, chart("kube-prometheus-stack").namespace),
        *rules.nothing_is_public(resources),
        *rules.containers_have_requests_and_limits(resources),
        *rules.versions_are_pinned(resources),
        *rules.no_secret_in_plain_text(resources),
        *rules.tensor_parallel_never_on_mig(resources),
        *engine_policies.engines_match_the_plan(resources, plan),
        *crd_policies.custom_resources_wait_for_their_crds(resources),
        *crd_policies.custom_resources_are_awaited(resources),
        *crd_policies.chart_crds_are_upgraded(resources),
        *engine_policies.engine_volumes_hold_their_checkpoint(resources, plan),
        *engine_policies.engines_scale_within_the_plans_bounds(resources, plan),
        *engine_policies.engines_fetch_nothing_at_start(resources, plan),
        *engine_policies.groups_leave_the_controller_its_names(resources),
        *bucket_policies.bucket_readers_have_an_identity(resources, plan),
        *cluster_policies.node_patches_leave_taints_alone(resources),
        *cluster_policies.autoscalers_have_a_metrics_api(resources, plan),
        *cluster_policies.autoscaler_behaviour_in_range(resources),
        *cluster_policies.service_monitors_find_their_targets(resources),
        *isolation_policies.tenants_get_the_isolation_they_were_promised(resources, plan),
        *routing_policies.engines_are_routed_as_planned(resources, plan),
    ]


def check_rendering(rendering: Rendering, plan: Plan) -> list[str]:
    return (validate_manifests(rendering.manifests(), plan.kubernetes_version)
            + chart_values_problems(rendering.releases()) + policy_violations(rendering, plan))
