"""GPU nodes as rendered: NodePatches that take over their labels and never the
taint list (Node.spec.taints is an atomic list under server-side apply, so an
apply would own, conflict on, or wipe every other manager's taint), and GPU
Operator values that follow the Plan's environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tenantry.configs.node_registration import MIG_CONFIG_LABEL, WHOLE_GPUS
from tenantry.deploy.gpu_nodes import CRITICAL_PODS_QUOTA, FIELD_MANAGER
from tenantry.manifests.offline import render
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

GPU_STACKS = ("h100-mig-mixed", "h100x8-shared-70b", "h200-many-adapters")


@pytest.fixture(scope="module", params=GPU_STACKS)
def rendered(request):
    return plan_stack(request.param), shared_render(request.param)


def _node_patches(rendering) -> list[dict[str, Any]]:
    return [r.inputs for r in rendering.resources if r.type == "kubernetes:core/v1:NodePatch"]


def _operator_values(rendering) -> dict[str, Any]:
    return next(r.inputs["values"] for r in rendering.releases() if r.inputs["chart"] == "gpu-operator")


def test_every_listed_node_gets_one_patch(rendered):
    plan, rendering = rendered
    patched = sorted(p["metadata"]["name"] for p in _node_patches(rendering))
    assert patched == sorted(n for pool in plan.pools for n in pool.node_names or ())
    assert patched


def test_node_patches_set_labels_and_never_the_taint_list(rendered):
    plan, rendering = rendered
    pool_of = {n: pool for pool in plan.pools for n in pool.node_names or ()}
    for patch in _node_patches(rendering):
        fields = set(patch) - {"apiVersion", "kind"}
        assert fields == {"metadata"}, f"NodePatch {patch['metadata']['name']} patches {sorted(fields)}"
        metadata = patch["metadata"]
        pool = pool_of[metadata["name"]]
        assert set(metadata) == {"name", "labels", "annotations"}
        assert metadata["labels"] == {"node-restriction.kubernetes.io/tenantry-pool": pool.name, MIG_CONFIG_LABEL: pool.mig_config or WHOLE_GPUS}


def test_node_patches_take_over_their_labels_under_one_named_field_manager(rendered):
    """Forced: a label first set by another manager (the GPU Operator's own mig.config
    default, a `kubectl label`) is taken over instead of failing the apply; a label map
    is owned key by key, so nothing else on the node changes."""
    _, rendering = rendered
    for patch in _node_patches(rendering):
        assert patch["metadata"]["annotations"] == {"pulumi.com/patchForce": "true",
                                                    "pulumi.com/patchFieldManager": FIELD_MANAGER}


def test_the_operator_tolerates_the_taints_nodes_are_registered_with(rendered):
    _, rendering = rendered
    values = _operator_values(rendering)
    for tolerations in (values["daemonsets"]["tolerations"], values["node-feature-discovery"]["worker"]["tolerations"]):
        assert {t["key"] for t in tolerations} >= {"nvidia.com/gpu", "tenantry.io/pool"}


def test_operator_values_follow_the_plans_environment(rendered):
    plan, rendering = rendered
    values = _operator_values(rendering)
    chosen = plan.cluster.gpu_operator
    assert values["driver"]["enabled"] is (chosen.driver == "operator")
    assert values["toolkit"]["enabled"] is (chosen.container_toolkit == "operator")
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": str(chosen.mig_reboot).lower()}]
    assert values["hostPaths"]["driverInstallDir"] == chosen.driver_install_dir
    assert values["operator"]["runtimeClass"] == chosen.runtime_class


def _variant(tmp_path: Path, stack: str, **cluster: Any) -> Path:
    spec = yaml.safe_load(stack_path(stack).read_text(encoding="utf-8"))
    spec["cluster"].update(cluster)
    if cluster.get("environment") in ("gke", "aks"):
        spec["platform"].pop("cloud_identity", None)
        spec["platform"]["cloud_identity"] = {"provider": "static", "credentials_secret": "bucket-keys"}
    path = tmp_path / f"{stack}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_a_gke_stack_renders_googles_driver_paths_and_reboots_for_mig(tmp_path):
    path = _variant(tmp_path, "h100-mig-mixed", environment="gke")
    values = _operator_values(render(path))
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is True
    assert values["hostPaths"]["driverInstallDir"] == "/home/kubernetes/bin/nvidia"
    assert values["toolkit"]["installDir"] == "/home/kubernetes/bin/nvidia"
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in values["toolkit"]["env"]
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}]


def test_an_override_beats_the_environment(tmp_path):
    path = _variant(tmp_path, "h100-mig-mixed", environment="aks",
                    gpu_operator={"driver": "operator", "mig_reboot": False})
    values = _operator_values(render(path))
    assert values["driver"]["enabled"] is True and values["toolkit"]["enabled"] is False
    assert values["operator"]["runtimeClass"] == "nvidia-container-runtime"
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "false"}]


def test_on_gke_the_operators_critical_pods_get_their_quota_before_the_release(tmp_path):
    path = _variant(tmp_path, "h100x8-shared-70b", environment="gke")
    rendering = render(path)
    [quota] = [r for r in rendering.resources if r.kind == "ResourceQuota" and r.inputs["metadata"]["name"] ==
               CRITICAL_PODS_QUOTA]
    assert quota.inputs["metadata"]["namespace"] == "gpu-operator"
    assert quota.inputs["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [
        "system-node-critical", "system-cluster-critical"]
    release = next(r for r in rendering.releases() if r.inputs["chart"] == "gpu-operator")
    assert quota.urn in release.dependencies


def test_elsewhere_no_quota_limits_the_operators_pods(rendered):
    _, rendering = rendered
    assert not [r for r in rendering.resources if r.kind == "ResourceQuota"
                and r.inputs["metadata"]["name"] == CRITICAL_PODS_QUOTA]
