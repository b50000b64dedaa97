"""`tenantry manifests STACK --out DIR`: manifests for review or GitOps."""

from __future__ import annotations

import json

import kubernetes_validate
import yaml

from tenantry.cli import main
from tests.unit.specs import base_spec, to_yaml


def test_manifests_writes_valid_manifests(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["manifests", "stacks/h100x8-shared-70b.yaml", "--out", str(out)]) == 0
    assert "valid" in capsys.readouterr().out
    files = sorted(out.rglob("*.yaml"))
    objects = [yaml.safe_load(f.read_text()) for f in files if f.parent.name != "releases"]
    built_in = [o for o in objects
                if not o["apiVersion"].startswith(("monitoring.coreos.com", "postgresql.cnpg.io", "barmancloud.cnpg.io"))]
    for obj in built_in:
        kubernetes_validate.validate(obj, "1.35", strict=True)
    assert {o["kind"] for o in objects} >= {"Deployment", "Service", "NetworkPolicy", "Namespace", "ResourceQuota",
                                            "ServiceMonitor", "PodMonitor", "Cluster", "ObjectStore", "Job", "Node"}
    releases = {yaml.safe_load(f.read_text())["chart"] for f in (out / "releases").glob("*.yaml")}
    assert releases == {"gpu-operator", "kube-prometheus-stack", "cloudnative-pg", "cert-manager", "plugin-barman-cloud",
                        "metrics-server"}
    assert not any("mock-secret-" in f.read_text() for f in files)


def test_manifests_refuses_an_invalid_spec_with_the_plan_commands_error(tmp_path, capsys):
    spec = base_spec()
    spec["tenants"][0]["tpm"] = -5
    path = tmp_path / "bad.yaml"
    path.write_text(to_yaml(spec))
    assert main(["manifests", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "tenants[0].tpm" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_manifests_refuses_a_plan_that_does_not_fit(tmp_path, capsys):
    spec = base_spec()
    spec["engines"][1]["replicas"] = 9
    path = tmp_path / "crowded.yaml"
    path.write_text(to_yaml(spec))
    assert main(["manifests", str(path), "--out", str(tmp_path / "out")]) == 1
    assert "cluster.node_pools[1]" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_json_is_not_needed_to_read_releases(tmp_path):
    assert main(["manifests", "local", "--out", str(tmp_path)]) == 0
    record = yaml.safe_load((tmp_path / "releases" / "kube-prometheus-stack.yaml").read_text())
    assert record["version"] == "88.5.3" and json.dumps(record)


def test_rendered_manifests_pass_the_kubernetes_validate_command(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    assert main(["manifests", "stacks/h100x8-shared-70b.yaml", "--out", str(tmp_path)]) == 0
    files = sorted(str(p) for p in tmp_path.rglob("*.yaml") if p.parent.name != "releases")
    cli = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run([str(cli), "--strict", "-k", "1.35", *files], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # Only the custom resources lack a schema; tenantry checks those structurally.
    warned = [line for line in result.stdout.splitlines() if line.startswith("WARN")]
    assert all(any(kind in w for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule", "postgresql.cnpg.io",
                                         "barmancloud.cnpg.io"))
               for w in warned), warned
