"""The commands' exit codes, tables, JSON and help, and errors without tracebacks:
`tenantry plan` in full; `tenantry local` and `tenantry gate` as far as they go
without starting a process (tests/local and tests/gate run them for real)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rich.console import Console

from tenantry.cli import main
from tenantry.cli.plan_report import print_plan
from tenantry.stacks import plan_stack
from tests.unit.specs import base_spec, to_yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


def test_six_stacks_are_shipped():
    assert SHIPPED == ["h100-isolation", "h100-mig-mixed", "h100x16-405b", "h100x8-shared-70b", "h200-many-adapters",
                       "local"]


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


def test_an_autoscaled_engine_shows_what_it_scales_up_on(capsys):
    """The thresholds its ScaledObject and alerts share: admission's best-effort shedding points (the Plan's
    gateway) and the tightest TTFT p95 of its tenants (600 ms, acme's and five others' in the stack)."""
    plan = plan_stack("h200-many-adapters")
    assert (plan.gateway.shed_best_effort_at_waiting, plan.gateway.shed_best_effort_at_kv_usage) == (4, 0.92)
    assert main(["plan", "h200-many-adapters"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "scales up on" in line)
    assert "waiting > 4, KV use > 92%, TTFT p95 > 0.6 s" in row, row
    assert main(["plan", "h100x8-shared-70b"]) == 0  # no engine autoscales there
    assert re.search(r"scales up on\s+│\s+—", capsys.readouterr().out)


def test_a_stack_of_many_tenants_lists_the_first_hundred_sums_the_tiers_and_splits_the_engines(tmp_path, capsys):
    """benchmarks/plan_scale.py's synthetic stack, which must also keep fitting (a refused plan stops early
    and would flatter the benchmark): 150 tenants on two engines."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from plan_scale import synthetic_stack

    spec = tmp_path / "synthetic.yaml"
    spec.write_text(synthetic_stack(150, 600), encoding="utf-8")
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    listed = out[out.index("\nTenants "):out.index("The first")]
    assert "tenant-0099" in listed and "tenant-0100" not in listed
    assert "The first 100 of 150 tenants: every one with --all-tenants, every figure with --json." in out
    start = out.index("Tenants by tier")
    tiers = out[start:out.index("\nTenants ", start)]
    assert re.search(r"guaranteed \(0\)\s+│\s+30 │", tiers) and re.search(r"spot \(100\)\s+│\s+60 │", tiers), tiers
    assert main(["plan", str(spec), "--all-tenants"]) == 0
    out = capsys.readouterr().out
    assert "tenant-0149" in out and "Tenants by tier" not in out and "The first" not in out
    # Each engine's figures stay legible: a table of as many engines as the terminal's width shows.
    assert "Engines (memory per GPU or MIG slice)" in out and "slice), 1-" not in out  # two engines, one table
    narrow = io.StringIO()
    print_plan(plan_stack(spec), Console(file=narrow, width=60))
    assert "1-1 of 2" in narrow.getvalue() and "2-2 of 2" in narrow.getvalue()


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


def crowded_spec(tmp_path: Path) -> Path:
    spec = base_spec()
    spec["engines"][0]["placement"]["tensor_parallel"] = 1  # 70B fp8 on one H100
    path = tmp_path / "crowded.yaml"
    path.write_text(to_yaml(spec))
    return path


def invalid_spec(tmp_path: Path) -> Path:
    spec = base_spec()
    spec["tenants"][0]["tpm"] = -5
    path = tmp_path / "bad.yaml"
    path.write_text(to_yaml(spec))
    return path


def local(action: str, *args: str, directory: Path) -> int:
    return main(["local", action, *args, "--dir", str(directory), "--port-base", "29900"])


def test_local_up_refuses_an_invalid_spec_with_2_before_starting_anything(tmp_path, capsys):
    assert local("up", str(invalid_spec(tmp_path)), directory=tmp_path / "stack") == 2
    assert "tenants[0].tpm" in capsys.readouterr().err
    assert not (tmp_path / "stack").exists()


def test_local_up_refuses_a_plan_that_does_not_fit_with_3_before_starting_anything(tmp_path, capsys):
    assert local("up", str(crowded_spec(tmp_path)), directory=tmp_path / "stack") == 3
    assert "engines[0].placement" in capsys.readouterr().err
    assert not (tmp_path / "stack").exists()


def test_local_status_with_nothing_running_is_a_failed_check_1(tmp_path, capsys):
    assert local("status", directory=tmp_path) == 1
    assert f"nothing running from {tmp_path}" in capsys.readouterr().out


def test_a_local_stack_error_exits_4_and_says_what_to_do(tmp_path, capsys):
    assert local("logs", "engine-tiny", directory=tmp_path) == 4
    assert "no log named engine-tiny" in capsys.readouterr().err


def test_local_budget_with_nothing_running_exits_4_and_says_how_to_start(tmp_path, capsys):
    assert local("budget", "globex", directory=tmp_path) == 4
    assert f"no local stack runs from {tmp_path}: start it with `tenantry local up`" in capsys.readouterr().err


def test_local_help_lists_every_exit_code():
    from tenantry.cli import local as local_command

    for code in (local_command.EXIT_OK, local_command.EXIT_CHECK_FAILED, 2, local_command.EXIT_DOES_NOT_FIT,
                 local_command.EXIT_STACK_ERROR):
        assert f" {code} " in " ".join(local_command.__doc__.split())


def test_gate_scenario_choices_come_from_the_scenarios(capsys):
    from tenantry.gate.scenarios import SCENARIOS

    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    help_text = "".join(capsys.readouterr().out.split())  # as wrapped, even within a hyphenated name
    assert ",".join(SCENARIOS) in help_text
    with pytest.raises(SystemExit) as refused:
        main(["gate", "local", "--scenario", "no-such-scenario"])
    assert refused.value.code == 2
    refusal = capsys.readouterr().err
    assert all(f"'{name}'" in refusal for name in SCENARIOS)


def test_gate_without_a_stack_to_run_against_exits_2_and_says_how_to_start_one(tmp_path, capsys):
    assert main(["gate", "local", "--scenario", "steady", "--dir", str(tmp_path), "--port-base", "29900"]) == 2
    assert f"no local stack runs from {tmp_path}" in capsys.readouterr().err


def test_gate_refuses_an_invalid_spec_with_2(tmp_path, capsys):
    assert main(["gate", str(invalid_spec(tmp_path)), "--scenario", "steady"]) == 2
    assert "tenants[0].tpm" in capsys.readouterr().err
