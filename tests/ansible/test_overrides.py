"""A site's own values reach the live node: with an extra admin network and an extra rule, ssh answers the site's
admin address and the extra port its network (fw-01); a later run without them drops both again, replacing
tenantry's table alone (fw-02). Packets from the peer namespace of tests/ansible/packets.py."""

from __future__ import annotations

import pytest

from tests.ansible import node
from tests.ansible.packets import SITE_ADMIN, STRANGER

SITE = {"firewall_admin_cidrs": ["192.0.2.0/24", f"{SITE_ADMIN}/32"],
        "firewall_extra_rules": [{"proto": "tcp", "port": 8443, "from": ["203.0.113.0/24"]}]}


@pytest.mark.control("fw-01")
@pytest.mark.control("fw-02")
def test_fw_01_fw_02_a_sites_extra_admin_network_and_rule_load_and_unload(container_node, link):
    # A table of someone else's (a CNI's), which reloading tenantry's rules must leave alone.
    container_node.host.check_output("nft add table inet cni_owned")
    try:
        added = node.playbook(container_node.inventory, "--tags", "firewall", extra_vars=SITE)
        assert added.returncode == 0, added.failures() or added.stderr[-2000:]
        assert link.accepts(SITE_ADMIN, "tcp", 22).outcome == "connected"
        assert link.accepts(STRANGER, "tcp", 8443).outcome == "refused"  # let in; nothing listens there
    finally:
        restored = node.playbook(container_node.inventory, "--tags", "firewall")
    assert restored.returncode == 0, restored.failures()
    link.drops(SITE_ADMIN, "tcp", 22)
    link.drops(STRANGER, "tcp", 8443)
    assert "table inet cni_owned" in container_node.host.check_output("nft list tables")
