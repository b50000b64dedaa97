"""How the tenant-policy plugin reaches the gateway: its files, shipped side by
side next to LiteLLM's config, loaded the way LiteLLM 1.108.7 loads a callback
(by file path, not registered in sys.modules, its folder not on sys.path), and
needing nothing but what the LiteLLM image has."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tenantry.configs.litellm import PLUGIN_FILES, POLICY_CALLBACK, tenant_policy_settings
from tenantry.stacks import plan_stack
from tests.unit.policy_plugin import plugin

GATEWAY = Path(plugin.__file__).parent
# orjson: a requirement of litellm[proxy] 1.108.7 (and of the image's requirements.txt).
IN_THE_LITELLM_IMAGE = {"httpx", "litellm", "orjson", "prometheus_client", "redis"}
NEIGHBOURS = {Path(name).stem for name in PLUGIN_FILES}


def test_every_module_of_the_plugin_is_shipped_and_the_entry_point_first():
    assert sorted(PLUGIN_FILES) == sorted(p.name for p in GATEWAY.glob("tenant_policy*.py"))
    assert PLUGIN_FILES[0] == POLICY_CALLBACK.split(".")[0] + ".py"


def test_the_plugin_imports_only_the_standard_library_its_image_and_its_neighbours():
    for name in PLUGIN_FILES:
        tree = ast.parse((GATEWAY / name).read_text(encoding="utf-8"))
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
        foreign = imported - sys.stdlib_module_names - IN_THE_LITELLM_IMAGE - NEIGHBOURS
        assert not foreign, f"{name} imports {sorted(foreign)}, which the LiteLLM image does not have"


LOAD_AS_LITELLM_DOES = """
import sys
sys.modules["tenantry"] = None  # the plugin runs in the LiteLLM image, where there is no tenantry
import os
from litellm.proxy.types_utils.utils import get_instance_fn
folder = os.path.dirname(sys.argv[2])
assert all(os.path.abspath(p or ".") != folder for p in sys.path), "not on sys.path before the plugin loads"
policy = get_instance_fn(value=sys.argv[1], config_file_path=sys.argv[2])
neighbours = sorted(n for n in sys.modules if n.startswith("tenant_policy"))
print(policy.settings.tenants["acme"].priority, [sys.modules[n].__file__ for n in neighbours])
"""


def _load_in_a_fresh_gateway(tmp_path: Path, settings: dict,
                             stale: str | None = None) -> subprocess.CompletedProcess:
    """The shipped files alone in a folder, loaded by LiteLLM's own loader in a
    new interpreter whose working directory (first on its sys.path) is
    elsewhere, holding a `stale` copy of one of them if asked."""
    folder, elsewhere = tmp_path / "config", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    if stale:
        shutil.copyfile(GATEWAY / stale, elsewhere / stale)
    for name in PLUGIN_FILES:
        shutil.copyfile(GATEWAY / name, folder / name)
    (folder / "tenant-policy.json").write_text(json.dumps(settings), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TENANTRY_POLICY_FILE"] = str(folder / "tenant-policy.json")
    return subprocess.run([sys.executable, "-c", LOAD_AS_LITELLM_DOES, POLICY_CALLBACK, str(folder / "config.yaml")],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)


def test_the_plugin_loads_the_way_litellm_loads_it_with_its_neighbours_from_its_own_folder(tmp_path):
    loaded = _load_in_a_fresh_gateway(tmp_path, tenant_policy_settings(plan_stack("local")))
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    priority, files = loaded.stdout.strip().splitlines()[-1].split(" ", 1)
    assert priority == "0"
    assert ast.literal_eval(files) == [str(tmp_path / "config" / name) for name in sorted(PLUGIN_FILES)
                                       if name != PLUGIN_FILES[0]]


def test_a_gateway_with_settings_the_plugin_does_not_know_fails_at_start_naming_the_key(tmp_path):
    settings = tenant_policy_settings(plan_stack("local"))
    settings["admission"]["shed_spot_at_queue"] = 1
    loaded = _load_in_a_fresh_gateway(tmp_path, settings)
    assert loaded.returncode != 0
    assert "admission.shed_spot_at_queue: unknown key" in loaded.stderr


def test_a_neighbour_found_outside_the_plugins_folder_stops_the_gateway(tmp_path):
    loaded = _load_in_a_fresh_gateway(tmp_path, tenant_policy_settings(plan_stack("local")),
                                      stale="tenant_policy_ledger.py")
    assert loaded.returncode != 0
    assert f"tenant_policy_ledger was imported from {tmp_path / 'elsewhere'}" in loaded.stderr
