"""`tenantry inventory`: the Ansible inventory of a stack's GPU hosts, from its Plan."""

from __future__ import annotations

import pytest
import yaml

from tenantry.cli import main
from tenantry.configs.ansible_inventory import ALL_POOLS_GROUP, gpu_pools, group_name, inventory
from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tenantry.stacks import STACKS_DIR, plan_stack
from tests.unit.specs import base_spec, to_yaml

REPO = STACKS_DIR.parent
SHIPPED = sorted(p.stem for p in STACKS_DIR.glob("*.yaml") if not p.name.startswith("Pulumi."))


def written(stack_plan) -> dict[str, dict]:
    return {f.path: yaml.safe_load(f.text) for f in inventory(stack_plan)}


def test_the_test_spec_inventory_is_worked_by_hand():
    files = written(plan(load_spec_text(to_yaml(base_spec())), "test"))
    assert files["hosts.yml"] == {"all": {"children": {ALL_POOLS_GROUP: {"children": {
        "pool_whole": {"hosts": {"gpu-whole-0": None}}, "pool_sliced": {"hosts": {}}}}}}}
    assert files["group_vars/pool_whole.yml"] == {
        "gpu_node_pool": "whole", "gpu_node_gpu": "H100-80GB-SXM", "gpu_node_gpu_mig_capable": True,
        "gpu_node_mig_config": "", "gpu_node_labels": {"nvidia.com/mig.config": "all-disabled"},
        "gpu_node_taint": "tenantry.io/pool=whole:NoSchedule"}
    sliced = files["group_vars/pool_sliced.yml"]
    assert sliced["gpu_node_gpu_mig_capable"] and sliced["gpu_node_mig_config"]
    assert sliced["gpu_node_labels"]["nvidia.com/mig.config"] == sliced["gpu_node_mig_config"]


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_shipped_stacks_gpu_pools_are_groups_with_the_labels_and_taint_pulumi_uses(stack):
    stack_plan = plan_stack(stack)
    files = written(stack_plan)
    groups = files["hosts.yml"]["all"]["children"][ALL_POOLS_GROUP]["children"] if gpu_pools(stack_plan) else {}
    assert set(groups) == {group_name(p) for p in gpu_pools(stack_plan)}
    for pool in gpu_pools(stack_plan):
        variables = files[f"group_vars/{group_name(pool)}.yml"]
        # Written out, not recomputed: the label deploy/gpu_nodes.py patches too, and the taint engines tolerate; the
        # pool and tenant labels are the platform's alone (NodeRestriction), never the kubelet's.
        assert variables["gpu_node_labels"] == {"nvidia.com/mig.config": pool.mig_config or "all-disabled"}
        assert variables["gpu_node_taint"] == f"tenantry.io/pool={pool.name}:NoSchedule"
        assert set(groups[group_name(pool)]["hosts"]) == set(pool.node_names or ())


def test_a_pool_name_with_dashes_becomes_a_valid_group_name():
    spec = base_spec()
    spec["cluster"]["node_pools"][0]["name"] = "h100-whole-a"
    for engine in spec["engines"]:
        if engine["placement"]["pool"] == "whole":
            engine["placement"]["pool"] = "h100-whole-a"
    files = written(plan(load_spec_text(to_yaml(spec)), "test"))
    assert files["group_vars/pool_h100_whole_a.yml"]["gpu_node_pool"] == "h100-whole-a"


def test_the_command_writes_the_files_and_refuses_a_stack_without_gpus(tmp_path, capsys):
    assert main(["inventory", "h100-mig-mixed", "--out", str(tmp_path)]) == 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yml")) == [
        "group_vars/gpu_pools.yml", "group_vars/pool_h100_mig.yml", "group_vars/pool_h100_whole.yml", "hosts.yml"]
    assert main(["inventory", "local", "--out", str(tmp_path / "local")]) == 1
    assert "has no GPU pool" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {}\n")
    assert main(["inventory", str(bad), "--out", str(tmp_path / "bad")]) == 2


def test_the_sites_networks_reach_every_gpu_host_and_a_wrong_one_is_refused(tmp_path, capsys):
    assert main(["inventory", "h100-mig-mixed", "--out", str(tmp_path), "--admin-cidr", "192.0.2.0/24",
                 "--admin-cidr", "2001:db8::/64", "--cni", "cilium-vxlan", "--pod-cidr", "100.64.0.0/16"]) == 0
    assert yaml.safe_load((tmp_path / "group_vars" / "gpu_pools.yml").read_text()) == {
        "firewall_admin_cidrs": ["192.0.2.0/24", "2001:db8::/64"], "firewall_cni_profile": "cilium-vxlan",
        "firewall_pod_cidrs": ["100.64.0.0/16"]}
    assert main(["inventory", "h100-mig-mixed", "--out", str(tmp_path / "unset")]) == 0
    unset = (tmp_path / "unset" / "group_vars" / "gpu_pools.yml").read_text()
    assert yaml.safe_load(unset) is None
    for name, flag in (("firewall_admin_cidrs", "--admin-cidr CIDR"), ("firewall_cni_profile", "--cni PROFILE"),
                       ("firewall_pod_cidrs", "--pod-cidr CIDR")):
        assert f"# {name} is not set: the firewall role refuses to run until it is" in unset and flag in unset
    for flag, value, message in (("--admin-cidr", "10.0.0.1/8", "--admin-cidr 10.0.0.1/8: 10.0.0.1/8 has host bits set"),
                                 ("--pod-cidr", "pods", "--pod-cidr pods: 'pods' does not appear to be")):
        assert main(["inventory", "h100-mig-mixed", "--out", str(tmp_path / "bad"), flag, value]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["inventory", "h100-mig-mixed", "--out", str(tmp_path / "bad"), "--cni", "flannel"])
    assert refused.value.code == 2 and "invalid choice: 'flannel'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists(), "nothing is written for a wrong network or CNI"


def test_the_cni_profiles_offered_are_the_firewall_roles():
    from tenantry.configs.ansible_inventory import CNI_PROFILES

    role_vars = yaml.safe_load((REPO / "ansible" / "roles" / "firewall" / "vars" / "main.yml").read_text())
    assert CNI_PROFILES == tuple(role_vars["firewall_cni_profiles"])
