"""__main__.py under Pulumi's mock runtime (no CLI, no cluster here): it
plans the stack named in config and refuses a bad spec before registering
anything, with the same field paths as `tenantry plan`."""

from __future__ import annotations

import runpy
from pathlib import Path

import pulumi
import pytest

from tests.unit.specs import base_spec, to_yaml

ROOT = Path(__file__).resolve().parents[2]


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):  # type: ignore[override]
        self.resources.append(args.name)
        return [f"{args.name}-id", args.inputs]

    def call(self, args: pulumi.runtime.MockCallArgs):  # type: ignore[override]
        return {}


def _run(spec_path: str, monkeypatch: pytest.MonkeyPatch, mocks: RecordingMocks | None = None,
         secrets: dict[str, str] | None = None) -> dict:
    mocks = mocks or RecordingMocks()
    secrets = {"tenantry:hfToken": "hf_test"} if secrets is None else secrets
    pulumi.runtime.set_mocks(mocks, project="tenantry", stack="test", preview=True)
    pulumi.runtime.set_all_config({"tenantry:spec": spec_path, **secrets}, secret_keys=list(secrets))
    exported: dict = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "__main__.py"))
    return exported


def test_program_plans_the_configured_stack(monkeypatch):
    exported = _run("stacks/h100-mig-mixed.yaml", monkeypatch)
    assert exported["tenant_namespaces"] == ["tenant-assistant", "tenant-partner-api", "tenant-internal-tools",
                                             "tenant-doc-classifier"]
    assert exported["gateway_url"] == "http://tenantry-gateway.tenantry.svc:4000"


def test_invalid_spec_fails_before_any_resource_with_field_paths(tmp_path, monkeypatch):
    spec = base_spec()
    spec["tenants"][0]["tpm"] = -5
    path = tmp_path / "bad.yaml"
    path.write_text(to_yaml(spec))
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as caught:
        _run(str(path), monkeypatch, mocks)
    assert "tenants[0].tpm" in str(caught.value) and "got -5" in str(caught.value)
    assert mocks.resources == []


def test_plan_that_does_not_fit_fails_with_its_reasons(tmp_path, monkeypatch):
    spec = base_spec()
    spec["engines"][1]["replicas"] = 9
    path = tmp_path / "crowded.yaml"
    path.write_text(to_yaml(spec))
    with pytest.raises(pulumi.RunError) as caught:
        _run(str(path), monkeypatch)
    assert "does not fit" in str(caught.value) and "cluster.node_pools[1]" in str(caught.value)


def test_gated_weights_without_a_hub_token_stop_the_program_with_the_command_to_set_it(monkeypatch):
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as caught:
        _run("stacks/h100-mig-mixed.yaml", monkeypatch, mocks, secrets={})
    message = str(caught.value)
    assert "engines llama-70b, mistral-7b, llama-3b fetch weights from a gated Hugging Face repository" in message
    assert "pulumi config set --secret tenantry:hfToken <token> --stack test" in message
    assert mocks.resources == []


def test_every_shipped_stack_has_its_pulumi_config():
    for spec in (ROOT / "stacks").glob("*.yaml"):
        if spec.name.startswith("Pulumi."):
            continue
        config = (ROOT / "stacks" / f"Pulumi.{spec.stem}.yaml").read_text()
        assert f"tenantry:spec: stacks/{spec.name}" in config
