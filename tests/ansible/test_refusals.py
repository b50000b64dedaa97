"""What the roles refuse before they change anything, on the hardened chroot nodes: a MIG pool on a GPU without MIG
(gpu-01), a variable of the wrong type (the argument specs, checked before the role's first task), and a Debian host
offered as a GPU host (gpu-12)."""

from __future__ import annotations

import pytest

from tests.ansible import node


@pytest.mark.control("gpu-01")
def test_gpu_01_a_mig_pool_on_a_gpu_without_mig_is_refused(chroot_node):
    # An inventory edited by hand: the Plan itself never puts a MIG layout on a GPU without MIG.
    run = node.playbook(chroot_node.inventory, "--tags", "gpu_node_mig_check_enabled",
                        extra_vars={"gpu_node_gpu": "L4", "gpu_node_gpu_mig_capable": False})
    failed = [t for t in run.tasks if t.status == "failed"]
    assert run.returncode != 0 and [t.control for t in failed] == ["gpu-01"], run.stderr[-2000:]
    assert "pool h100-mig asks for MIG configuration 'tenantry-1x3g.40gb-2x2g.20gb'" in failed[0].message
    assert "its GPU, L4, has no MIG" in failed[0].message
    assert run.stats.get("changed") == 0, run.stats


@pytest.mark.control("gpu-01")
def test_gpu_01_a_whole_gpu_pool_on_a_gpu_without_mig_passes(chroot_node):
    run = node.playbook(chroot_node.inventory, "--tags", "gpu_node_mig_check_enabled",
                        extra_vars={"gpu_node_gpu": "L4", "gpu_node_gpu_mig_capable": False, "gpu_node_mig_config": ""})
    assert run.returncode == 0, run.failures()
    assert [t.status for t in run.tasks if t.control == "gpu-01"] == ["ok"]


@pytest.mark.control("gpu-08")
def test_gpu_08_a_label_only_the_platform_may_set_is_refused_before_any_change(chroot_node):
    """An inventory edited by hand to have the kubelet register the node's pool: NodeRestriction would refuse it from
    the kubelet (which would not start), and a node that could set it could put itself in any pool."""
    labels = {"node-restriction.kubernetes.io/tenantry-pool": "h100-mig", "nvidia.com/mig.config": "all-disabled"}
    run = node.playbook(chroot_node.inventory, "--tags", "gpu_node_kubelet_enabled",
                        extra_vars={"gpu_node_labels": labels})
    failed = [t for t in run.tasks if t.status == "failed"]
    assert run.returncode != 0 and [t.name.split(" : ", 1)[-1] for t in failed] == [
        "Refuse node labels that only the platform may set"], run.stderr[-2000:]
    assert "gpu_node_labels has node-restriction.kubernetes.io/tenantry-pool" in failed[0].message, failed[0].message
    assert run.stats.get("changed") == 0, run.stats


@pytest.mark.control("os-09")
def test_os_09_a_variable_of_the_wrong_type_stops_the_play_before_any_task(chroot_node):
    run = node.playbook(chroot_node.inventory, extra_vars={"os_hardening_password_min_length": "fourteen"})
    failed = [t for t in run.tasks if t.status == "failed"]
    assert run.returncode != 0 and len(failed) == 1, run.stderr[-2000:]
    assert "os_hardening_password_min_length" in failed[0].message and "int" in failed[0].message, failed[0].message
    before = [t.name for t in run.tasks[: run.tasks.index(failed[0])]]
    assert before == ["Gathering Facts"], before
    assert run.stats.get("changed") == 0, run.stats


@pytest.mark.control("gpu-12")
def test_gpu_12_a_debian_gpu_host_is_refused_before_any_change(debian_node):
    """The Debian node of the suite, hardened as a node without GPUs, offered to gpu_node as its pool's host."""
    run = node.playbook(debian_node.inventory, "--tags", "gpu_node")
    failed = [t for t in run.tasks if t.status == "failed"]
    assert run.returncode != 0 and [t.control for t in failed] == ["gpu-12"], run.stderr[-2000:]
    assert "Ubuntu 22.04 or 24.04" in failed[0].message and "this host runs Debian 12" in failed[0].message
    assert "no Debian driver image" in failed[0].message, failed[0].message
    assert run.stats.get("changed") == 0, run.stats
