"""Where the cluster runs decides, once in the Plan, who installs the NVIDIA
driver and toolkit, whether the MIG manager may reboot a node, where the
operator finds the driver, and whether tenantry installs the metrics API;
each choice can be overridden in the spec."""

from __future__ import annotations

from typing import Any

import pytest

from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tests.unit.specs import base_spec, to_yaml


def _plan(**cluster: Any):
    """The base spec on `cluster`'s settings; without an environment, the default. Its buckets are read with a
    static identity here, which every environment takes (an AWS role needs eks: test_invalid_specs)."""
    spec = base_spec()
    spec["cluster"].pop("environment")
    spec["cluster"].update(cluster)
    spec["platform"]["cloud_identity"] = {"provider": "static", "credentials_secret": "bucket-keys"}
    return plan(load_spec_text(to_yaml(spec)), "test")


# environment: driver, toolkit, mig_reboot, metrics_api, driver install dir, runtime class
DEFAULTS = {
    "bare-metal": ("operator", "operator", False, "install", "/run/nvidia/driver", "nvidia"),
    "eks": ("preinstalled", "preinstalled", True, "install", "/run/nvidia/driver", "nvidia"),
    "gke": ("preinstalled", "operator", True, "present", "/home/kubernetes/bin/nvidia", "nvidia"),
    "aks": ("preinstalled", "preinstalled", True, "present", "/run/nvidia/driver", "nvidia-container-runtime"),
}


@pytest.mark.parametrize("environment", DEFAULTS)
def test_each_environment_has_safe_defaults(environment):
    cluster = _plan(environment=environment).cluster
    operator = cluster.gpu_operator
    assert (operator.driver, operator.container_toolkit, operator.mig_reboot, cluster.metrics_api,
            operator.driver_install_dir, operator.runtime_class) == DEFAULTS[environment]
    assert cluster.environment == environment


def test_without_an_environment_the_cluster_is_bare_metal_as_before():
    cluster = _plan().cluster
    assert cluster.environment == "bare-metal"
    assert (cluster.gpu_operator.driver, cluster.gpu_operator.container_toolkit) == ("operator", "operator")


@pytest.mark.parametrize(("override", "field", "value"), [
    ({"driver": "operator"}, "driver", "operator"),
    ({"container_toolkit": "preinstalled"}, "container_toolkit", "preinstalled"),
    ({"mig_reboot": False}, "mig_reboot", False),
])
def test_each_setting_overrides_its_environment_default(override, field, value):
    operator = _plan(environment="gke", gpu_operator=override).cluster.gpu_operator
    assert getattr(operator, field) == value
    untouched = {"driver": "preinstalled", "container_toolkit": "operator", "mig_reboot": True}
    untouched.pop(field)
    assert {k: getattr(operator, k) for k in untouched} == untouched


def test_the_metrics_api_choice_overrides_its_environment_default():
    """Where you installed metrics-server yourself (or as the EKS add-on); GKE and AKS
    always run their own, so `install` is refused there (test_invalid_specs)."""
    assert _plan(environment="eks", metrics_api="present").cluster.metrics_api == "present"
    assert _plan(environment="bare-metal", metrics_api="present").cluster.metrics_api == "present"
    assert _plan(environment="gke", metrics_api="present").cluster.metrics_api == "present"


def test_only_gke_needs_a_quota_for_the_operators_critical_pods():
    assert _plan(environment="gke").cluster.gpu_operator.critical_pods_quota == 100
    for environment in ("bare-metal", "eks", "aks"):
        assert _plan(environment=environment).cluster.gpu_operator.critical_pods_quota is None


def test_googles_driver_paths_apply_only_to_googles_driver():
    own_driver = _plan(environment="gke", gpu_operator={"driver": "operator"}).cluster.gpu_operator
    assert own_driver.driver_install_dir == "/run/nvidia/driver"
    assert own_driver.toolkit_install_dir == "/usr/local/nvidia"
    google = _plan(environment="gke").cluster.gpu_operator
    assert google.toolkit_install_dir == "/home/kubernetes/bin/nvidia"


def test_only_the_toolkit_the_operator_installs_on_gke_reads_containerds_config_file():
    assert _plan(environment="gke").cluster.gpu_operator.toolkit_runtime_config_from_file
    for other in ({"environment": "eks"}, {"environment": "bare-metal"},
                  {"environment": "gke", "gpu_operator": {"container_toolkit": "preinstalled"}}):
        assert not _plan(**other).cluster.gpu_operator.toolkit_runtime_config_from_file


def test_a_cloud_that_may_not_reboot_for_mig_is_warned_about_with_the_field():
    result = _plan(environment="eks", gpu_operator={"mig_reboot": False})
    warning = next(w for w in result.warnings if w.path == "cluster.gpu_operator.mig_reboot")
    assert "mig.config.state=failed" in warning.message
    assert not [w for w in _plan(environment="bare-metal").warnings if w.path == "cluster.gpu_operator.mig_reboot"]


def test_kubelet_certificates_are_self_signed_on_bare_metal_unless_the_spec_says_otherwise():
    assert _plan().cluster.kubelet_serving_certs == "self-signed"  # kubeadm's default
    for environment in ("eks", "gke", "aks"):
        assert _plan(environment=environment).cluster.kubelet_serving_certs == "cluster-ca"
    assert _plan(kubelet_serving_certs="cluster-ca").cluster.kubelet_serving_certs == "cluster-ca"  # serverTLSBootstrap
