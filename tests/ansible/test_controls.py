"""Each control's facts on each kind of hardened node, one fact per case, the control's ID in the case's ID.
A fact is skipped only where ansible/waivers.yml says why."""

from __future__ import annotations

import pytest

from tests.ansible import node
from tests.ansible.builds import hardened
from tests.ansible.controls import FACTS

# Files, packages and accounts on the chroot kinds; what only a running system shows on every kind. The container
# boots the Ubuntu chroot's hardened tree, so its files are the ones already checked there. A node is checked for
# the controls of the roles that hardened it (Debian's: not gpu_node, which refuses it).
CASES = [pytest.param(key, fact, id=f"{key}-{fact.id}") for key in node.NODES for fact in FACTS
         if (fact.live or node.NODES[key].target != "container") and fact.control in node.controls_of(key)]


@pytest.mark.parametrize(("key", "fact"), CASES)
def test_control(key, fact):
    target = node.NODES[key].target
    why = node.waiver(target, fact.control, fact.name)
    if why:
        pytest.skip(f"waived on {target}: {why}")
    hardened_node = hardened(key)
    assert hardened_node.converge.returncode == 0, f"{key} did not converge: {hardened_node.converge.failures()}"
    fact.check(hardened_node.host)
