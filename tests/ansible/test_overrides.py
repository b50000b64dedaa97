"""A site's own values reach the live node: an extra admin network and an extra rule load into the container's
firewall (fw-01), and a later run without them takes them out again, replacing tenantry's table alone (fw-02)."""

from __future__ import annotations

import pytest

from tests.ansible import node

EXTRA_ADMIN = "198.51.100.7"
SITE = {"firewall_admin_cidrs": ["192.0.2.0/24", f"{EXTRA_ADMIN}/32"],
        "firewall_extra_rules": [{"proto": "tcp", "port": 8443, "from": ["203.0.113.0/24"]}]}


def _ruleset(container_node) -> str:
    return container_node.host.check_output("nft list table inet tenantry_host")


@pytest.mark.control("fw-01")
@pytest.mark.control("fw-02")
def test_fw_01_fw_02_a_sites_extra_admin_network_and_rule_load_and_unload(container_node):
    # A table of someone else's (a CNI's), which reloading tenantry's rules must leave alone.
    container_node.host.check_output("nft add table inet cni_owned")
    try:
        added = node.playbook(container_node.inventory, "--tags", "firewall", extra_vars=SITE)
        assert added.returncode == 0, added.failures() or added.stderr[-2000:]
        loaded = _ruleset(container_node)
        assert EXTRA_ADMIN in loaded and "tcp dport 8443 ip saddr @extra1_v4 accept" in loaded, loaded
    finally:
        restored = node.playbook(container_node.inventory, "--tags", "firewall")
    assert restored.returncode == 0, restored.failures()
    loaded = _ruleset(container_node)
    assert EXTRA_ADMIN not in loaded and "8443" not in loaded, loaded
    assert "table inet cni_owned" in container_node.host.check_output("nft list tables")
