"""site.yml on each kind of throwaway node: it converges, a second run changes nothing, and every control's task
either ran or is waived for that kind of target (ansible/waivers.yml), with no waiver left over."""

from __future__ import annotations

import pytest

from tests.ansible import node
from tests.ansible.builds import hardened


@pytest.mark.parametrize("key", node.NODES)
def test_site_converges(key):
    run = hardened(key).converge
    assert run.returncode == 0 and not run.failures(), run.failures() or run.stderr[-3000:]
    assert run.stats.get("ok", 0) > 0


@pytest.mark.parametrize("key", [key for key, kind in node.NODES.items() if kind.second_run])
def test_a_second_run_changes_nothing(key):
    hardened_node = hardened(key)
    run = hardened_node.second_run
    assert run is not None, f"no second run: the converge failed ({hardened_node.converge.failures()})"
    assert run.returncode == 0, run.failures() or run.stderr[-3000:]
    assert [t.name for t in run.tasks if t.status == "changed"] == []
    assert run.stats.get("changed") == 0, run.stats


SERVICE_CONTROLS = {"ssh-06", "fw-03", "gpu-06"}


def test_the_booted_tree_changes_only_by_starting_services():
    """The container boots a tree already hardened and converged twice: the pass there may start services (the
    firewall's, which Debian leaves off) and nothing else."""
    run = hardened(node.UBUNTU_CONTAINER).converge
    changed = [t.name for t in run.tasks if t.status == "changed" and t.control not in SERVICE_CONTROLS]
    assert changed == []


@pytest.mark.parametrize("key", node.NODES)
def test_every_control_ran_unless_waived(key):
    run, kind = hardened(key).converge, node.NODES[key]
    target = kind.target
    statuses = {t.control: t.status for t in run.tasks if t.control}
    assert set(node.control_tasks(kind.skip_roles)) - set(statuses) == set(), "control tasks that never came up"
    unwaived = {c for c, status in statuses.items() if status == "skipped" and node.waiver(target, c) is None}
    assert unwaived == set(), f"skipped on {target} without a waiver in ansible/waivers.yml"


@pytest.mark.parametrize("key", node.NODES)
def test_no_waiver_covers_a_control_that_ran(key):
    """A waiver of a whole control whose task now runs on this kind is stale: the facts it skips can be checked."""
    run, target = hardened(key).converge, node.NODES[key].target
    ran = {t.control for t in run.tasks if t.control and t.status != "skipped"}
    stale = {c for c, entry in node.waivers().get(target, {}).items() if "facts" not in entry and c in ran}
    assert stale == set(), f"waived on {target} although their tasks ran"
