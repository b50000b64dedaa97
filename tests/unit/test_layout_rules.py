"""The layout's rules, read from the code itself (docs/adding-an-outlet.md).

Imports flow one way, spec → plan → derived configs → outlets:
- the plan imports nothing above it (only the spec, the catalog and the
  shared leaves), the spec nothing above the catalog;
- derived configs (tenantry/configs/) import no outlet;
- the gate runs against a Target and imports neither the local stack nor
  the Kubernetes program; deploy and local never import each other;
- the gateway's plugin runs inside the LiteLLM image and imports nothing of
  tenantry.
And every piece stays small enough to read: no module over 400 lines and no
function over 60 without a written reason here.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEAVES = {"tenantry.units", "tenantry.findings", "tenantry.pins"}

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
LONG_ON_PURPOSE: dict[str, str] = {
    # "path" or "path::function": the written reason it stays long.
    "tenantry/plan/model.py": "The Plan's data model: one frozen dataclass per part, each field documented, in the "
    "order `tenantry plan --json` prints them and docs/platform.md lists them; split, the modules that plan each "
    "part would import one another's types in cycles (lora -> memory -> model).",
    "tests/unit/test_alert_thresholds.py": "One promtool case per alert, both sides, with the series helpers beside "
    "the cases that read them: the table grows with the alerts, and a reviewer checks an alert's case against its "
    "rule in one place.",
}


def _python_files(under: str = "") -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in listed if p.startswith(under) and (ROOT / p).exists()]


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module this file imports, at the top or inside a function."""
    found: set[str] = set()
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _tenantry_imports(under: str) -> dict[str, set[str]]:
    return {str(path.relative_to(ROOT)): {m for m in _imports(path) if m == "tenantry" or m.startswith("tenantry.")}
            for path in _python_files(under)}


def _violations(under: str, allowed: set[str] | None = None, forbidden: set[str] | None = None) -> list[str]:
    def within(module: str, packages: set[str]) -> bool:
        return any(module == p or module.startswith(p + ".") for p in packages)

    return [f"{path} imports {module}"
            for path, modules in sorted(_tenantry_imports(under).items()) for module in sorted(modules)
            if (allowed is not None and not within(module, allowed))
            or (forbidden is not None and within(module, forbidden))]


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    package = tmp_path / "tenantry" / "gate"
    package.mkdir(parents=True)
    (package / "run.py").write_text("from . import scenarios\nfrom ..plan.model import Plan\n\n"
                                    "def f():\n    import tenantry.local.stack\n")
    found = _imports(package / "run.py", root=tmp_path)
    assert {"tenantry.gate.scenarios", "tenantry.plan.model.Plan", "tenantry.local.stack"} <= found


@pytest.mark.parametrize(("room", "allowed"), [
    ("tenantry/catalog/", {"tenantry.catalog"} | LEAVES),
    ("tenantry/spec/", {"tenantry.spec", "tenantry.catalog"} | LEAVES),
    ("tenantry/plan/", {"tenantry.plan", "tenantry.spec", "tenantry.catalog"} | LEAVES),
    # The plugin and the reconciler import nothing of tenantry: their names are safe to share.
    ("tenantry/configs/", {"tenantry.configs", "tenantry.gateway", "tenantry.plan", "tenantry.spec", "tenantry.catalog"}
     | LEAVES),
])
def test_each_layer_imports_only_what_is_below_it(room, allowed):
    assert _violations(room, allowed=allowed) == []


@pytest.mark.parametrize(("room", "forbidden"), [
    ("tenantry/gate/", {"tenantry.local", "tenantry.deploy", "tenantry.manifests", "tenantry.cli"}),
    ("tenantry/deploy/", {"tenantry.local", "tenantry.gate", "tenantry.manifests", "tenantry.cli"}),
    ("tenantry/local/", {"tenantry.deploy", "tenantry.gate", "tenantry.manifests", "tenantry.cli"}),
    ("tenantry/manifests/", {"tenantry.local", "tenantry.gate", "tenantry.cli"}),
])
def test_outlets_do_not_import_each_other(room, forbidden):
    assert _violations(room, forbidden=forbidden) == []


def test_the_gateway_plugin_imports_nothing_of_tenantry():
    # It is shipped as files next to LiteLLM's config.yaml, inside the LiteLLM image.
    plugin = [p for p in _python_files("tenantry/gateway/") if p.name != "__init__.py"]
    assert plugin, "no plugin module found"
    leaks = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m.startswith("tenantry"))
             for p in plugin}
    assert {path: modules for path, modules in leaks.items() if modules} == {}


def _long_pieces() -> dict[str, int]:
    long: dict[str, int] = {}
    for path in _python_files():
        relative = str(path.relative_to(ROOT))
        source = path.read_text(encoding="utf-8")
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES:
            long[relative] = lines
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{relative}::{node.name}"] = length
    return long


def test_no_module_or_function_is_long_without_a_written_reason():
    unexplained = {piece: n for piece, n in _long_pieces().items() if not LONG_ON_PURPOSE.get(piece, "").strip()}
    assert unexplained == {}, (f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function: split "
                               "it, or add it with its reason to LONG_ON_PURPOSE")


def test_every_written_reason_still_applies():
    stale = set(LONG_ON_PURPOSE) - set(_long_pieces())
    assert stale == set(), "these are short now: remove them from LONG_ON_PURPOSE"
