"""On-call's commands run on the objects tenantry renders (issue 35, item 13).

runbooks/procedures/restore-postgres.md's own jq programs, run on the PostgreSQL Cluster: the scratch Cluster that proves a backup restores before anything is deleted archives nowhere, runs under
the production Cluster's service account (the one the bucket's identity trusts) and reads the production archive;
the replacement archives under a new server name. Both are valid against the pinned CloudNativePG CRD. (No
cluster here: that the restore itself completes is CloudNativePG's, proven on a cluster.)

runbooks/GatewayReplicaDown.md's digest of the gateway's ConfigMap, computed by its own command line, is the one
the rendered Deployment's pods were started for: on-call can tell a configuration change from a template change
before choosing `kubectl rollout undo` (which reverts the template only) or a spec rollback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tenantry.deploy.postgres import BARMAN_PLUGIN, CLUSTER_NAME, OBJECT_STORE
from tenantry.manifests.validate import validate_manifests
from tenantry.stacks import plan_stack
from tests.manifests.tampering import shared_render
from tests.unit.runbook_commands import code_blocks

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
PAGE = RUNBOOKS / "procedures" / "restore-postgres.md"
STACK = "h100-isolation"  # PostgreSQL with backups
CAPTURED = "tenantry-postgres-before-restore.json"


def _run_jq_of_step(marker: str, folder: Path) -> None:
    """The page's jq command of the block holding `marker`, from `jq` to its output redirect, run by bash."""
    (block,) = [b for b in code_blocks(PAGE.read_text(encoding="utf-8")) if marker in b]
    lines = block.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("jq "))
    last = next(i for i, line in enumerate(lines) if i >= first and f"{CAPTURED} >" in line)
    command = "\n".join(lines[first:last + 1])
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=folder, capture_output=True, text=True,
                          timeout=60, check=False, env={"CHECK": "tenantry-postgres-restore-check", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> tuple[Path, dict]:
    (cluster,) = [m for m in shared_render(STACK).manifests() if m["kind"] == "Cluster"]
    folder = tmp_path_factory.mktemp("restore")
    (folder / CAPTURED).write_text(json.dumps(cluster))
    return folder, cluster


def test_the_scratch_cluster_reads_the_archive_under_the_trusted_account_and_archives_nowhere(captured):
    folder, cluster = captured
    _run_jq_of_step("$CHECK.json", folder)
    scratch = json.loads((folder / "tenantry-postgres-restore-check.json").read_text())
    spec = scratch["spec"]
    assert scratch["metadata"]["name"] == "tenantry-postgres-restore-check" != cluster["metadata"]["name"]
    assert "plugins" not in spec and "backup" not in spec  # it must never write into the production archive
    assert cluster["spec"]["serviceAccountTemplate"]["metadata"]["annotations"]  # the identity the bucket trusts
    assert (spec["serviceAccountName"], "serviceAccountTemplate" in spec) == (CLUSTER_NAME, False)
    initdb = cluster["spec"]["bootstrap"]["initdb"]  # LiteLLM's database, owner and password Secret, as restored
    assert spec["bootstrap"] == {"recovery": {"source": "origin", "database": initdb["database"],
                                              "owner": initdb["owner"], "secret": initdb["secret"]}}
    assert spec["instances"] == 1
    assert spec["externalClusters"] == [{"name": "origin", "plugin": {"name": BARMAN_PLUGIN, "parameters": {
        "barmanObjectName": OBJECT_STORE, "serverName": CLUSTER_NAME}}}]
    assert validate_manifests([scratch], plan_stack(STACK).kubernetes_version) == []


def test_the_replacement_keeps_the_name_and_archives_under_a_new_server(captured):
    folder, cluster = captured
    _run_jq_of_step("jq --arg new", folder)
    replacement = json.loads((folder / "tenantry-postgres-restore.json").read_text())
    spec = replacement["spec"]
    assert replacement["metadata"]["name"] == CLUSTER_NAME
    (archive,) = spec["plugins"]
    assert archive["parameters"]["serverName"].startswith(f"{CLUSTER_NAME}-")
    assert spec["externalClusters"][0]["plugin"]["parameters"]["serverName"] == CLUSTER_NAME
    assert spec["bootstrap"]["recovery"]["secret"] == cluster["spec"]["bootstrap"]["initdb"]["secret"]
    assert validate_manifests([replacement], plan_stack(STACK).kubernetes_version) == []


def test_the_runbooks_digest_of_the_gateways_configmap_is_the_one_its_pods_were_started_for(tmp_path):
    manifests = shared_render(STACK).manifests()
    (config,) = [m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "tenantry-gateway"]
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "tenantry-gateway"]
    started_for = deployment["spec"]["template"]["metadata"]["annotations"]["tenantry.io/config-digest"]
    text = (RUNBOOKS / "GatewayReplicaDown.md").read_text(encoding="utf-8")
    (line,) = [line.strip() for block in code_blocks(text) for line in block.splitlines() if "sha256sum" in line]
    kubectl, pipeline = line.split(" | ", 1)
    assert kubectl == "kubectl -n $NAMESPACE get configmap tenantry-gateway -o json", kubectl
    (tmp_path / "configmap.json").write_text(json.dumps(config))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", f"cat configmap.json | {pipeline}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, started_for), done.stderr
    changed = {**config, "data": {**config["data"], "config.yaml": config["data"]["config.yaml"] + "\n# edited"}}
    (tmp_path / "configmap.json").write_text(json.dumps(changed))
    edited = subprocess.run(["bash", "-euo", "pipefail", "-c", f"cat configmap.json | {pipeline}"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert edited.stdout.strip() != started_for
