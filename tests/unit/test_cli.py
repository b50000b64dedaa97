"""`tenantry plan`: exit codes, tables, JSON, and errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tenantry.cli import main
from tests.unit.specs import base_spec, to_yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


def test_four_stacks_are_shipped():
    assert SHIPPED == ["h100-mig-mixed", "h100x8-shared-70b", "h200-many-adapters", "local"]


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_shipped_stack_fits_and_its_json_parses(stack, capsys):
    assert main(["plan", f"stacks/{stack}.yaml", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["stack"] == stack and data["refusals"] == []


@pytest.mark.parametrize("stack", SHIPPED)
def test_tables_show_every_engine_tenant_and_the_verdict(stack, capsys):
    assert main(["plan", stack]) == 0
    out = capsys.readouterr().out
    spec = yaml.safe_load((ROOT / "stacks" / f"{stack}.yaml").read_text())
    for engine in spec["engines"]:
        assert engine["name"] in out
    for tenant in spec["tenants"]:
        assert tenant["name"] in out
    assert "FITS" in out and "max_num_seqs" in out and "KV tokens per replica" in out


def test_a_plan_that_does_not_fit_exits_1_with_every_reason(tmp_path, capsys):
    spec = base_spec()
    spec["engines"][0]["placement"]["tensor_parallel"] = 1  # 70B fp8 on one H100
    spec["engines"][1]["replicas"] = 9  # more 3g.40gb slices than the pool carves
    path = tmp_path / "crowded.yaml"
    path.write_text(to_yaml(spec))
    assert main(["plan", str(path)]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out
    assert "engines[0].placement" in out and "cluster.node_pools[1]" in out
    assert main(["plan", str(path), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is False
    assert {r["path"] for r in data["refusals"]} >= {"engines[0].placement", "cluster.node_pools[1]"}


def test_an_invalid_spec_exits_2_with_paths_on_stderr(tmp_path, capsys):
    spec = base_spec()
    spec["tenants"][0]["tpm"] = -5
    path = tmp_path / "bad.yaml"
    path.write_text(to_yaml(spec))
    assert main(["plan", str(path)]) == 2
    captured = capsys.readouterr()
    assert "tenants[0].tpm" in captured.err and "got -5" in captured.err and "tenant alpha" in captured.err
    assert main(["plan", str(path), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False and data["errors"][0]["path"] == "tenants[0].tpm"


def test_markup_in_messages_is_printed_literally(tmp_path, capsys):
    spec = base_spec()
    spec["cluster"]["node_pools"][1]["mig_layout"] = ["4g.40gb", "4g.40gb"]
    path = tmp_path / "mig.yaml"
    path.write_text(to_yaml(spec))
    assert main(["plan", str(path)]) == 2
    assert "[4g.40gb, 4g.40gb] cannot be carved" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argument", "words"),
    [("stacks/missing.yaml", "no such file"), ("stacks", "is a directory"), ("nope", "no such file")],
)
def test_missing_files_are_spec_errors_not_tracebacks(argument, words, capsys):
    assert main(["plan", argument]) == 2
    assert words in capsys.readouterr().err


def test_stack_name_from_file_must_be_valid(tmp_path, capsys):
    path = tmp_path / "My Stack.yaml"
    path.write_text(to_yaml(base_spec()))
    assert main(["plan", str(path)]) == 2
    assert "stack name" in capsys.readouterr().err


def test_console_script_runs_without_a_traceback(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("cluster: [\n")
    result = subprocess.run(
        [sys.executable, "-m", "tenantry", "plan", str(bad)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 2
    assert "YAML syntax error" in result.stderr and "Traceback" not in result.stderr
