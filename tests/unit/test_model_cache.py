"""The model cache at plan time and in the Job that fills it: the plan refuses
replicas that a ReadWriteOnce claim cannot follow across nodes, gives each
cache Job a deadline from what it fetches, knows which sources are gated; and
the Hub fetch takes only the files vLLM reads."""

from __future__ import annotations

import json

import pytest

from tenantry.deploy.hub_fetch import model_files
from tenantry.findings import SpecError
from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tests.unit.specs import base_spec, to_yaml


def _plan(spec: dict):
    return plan(load_spec_text(to_yaml(spec)), "test")


def _across_two_nodes(spec: dict) -> dict:
    spec["cluster"]["node_pools"][0].update(nodes=2, node_names=["gpu-whole-0", "gpu-whole-1"])
    return spec


def test_read_write_once_cache_refuses_replicas_that_can_span_nodes():
    refused = _plan(_across_two_nodes(base_spec()))
    found = [f for f in refused.refusals if f.path == "engines[0].replicas"]
    assert found and "ReadWriteOnce" in found[0].message and "platform.model_cache.access_mode" in found[0].message
    assert "(engine big)" in found[0].message


def test_read_write_many_cache_lets_replicas_span_nodes():
    spec = _across_two_nodes(base_spec())
    spec.setdefault("platform", {})["model_cache"] = {"access_mode": "ReadWriteMany", "storage_class": "efs"}
    planned = _plan(spec)
    assert not [f for f in planned.refusals if f.path == "engines[0].replicas"]
    assert (planned.platform.model_cache_access_mode, planned.platform.model_cache_storage_class) == (
        "ReadWriteMany", "efs")


def test_read_write_many_on_the_default_storage_class_is_warned():
    spec = _across_two_nodes(base_spec())
    spec.setdefault("platform", {})["model_cache"] = {"access_mode": "ReadWriteMany"}
    warned = [f for f in _plan(spec).warnings if f.path == "platform.model_cache.storage_class"]
    assert warned and "must offer ReadWriteMany" in warned[0].message


def test_cache_storage_class_defaults_to_the_platforms():
    spec = base_spec()
    spec.setdefault("platform", {})["storage_class"] = "fast"
    assert _plan(spec).platform.model_cache_storage_class == "fast"


def test_unknown_access_mode_is_invalid_with_its_path():
    spec = base_spec()
    spec.setdefault("platform", {})["model_cache"] = {"access_mode": "ReadOnlyMany"}
    with pytest.raises(SpecError) as caught:
        _plan(spec)
    assert any(f.path == "platform.model_cache.access_mode" for f in caught.value.findings)


def test_cache_jobs_get_a_deadline_from_the_checkpoint_and_the_adapters():
    planned = _plan(base_spec())
    big, small = planned.engine("big"), planned.engine("small")
    # 70.55e9 parameters in bf16 (fp8 quantised on load): 132 GiB at 12 s per GiB after 600 s.
    assert big.pod.download_bytes == 141_107_412_992
    assert big.pod.populate_seconds == 600 + 12 * 132
    adapters = sum(a.bytes for a in small.lora.adapters)
    assert small.pod.populate_seconds == 600 + 12 * -(-(small.pod.download_bytes + adapters) // 2**30)


def test_gated_follows_the_catalog_repository():
    planned = _plan(base_spec())
    assert planned.engine("big").gated  # meta-llama
    spec = base_spec()
    spec["engines"][0]["source"] = "s3://weights/llama-3.1-70b"
    spec["engines"][0]["revision"] = "copy-1"
    spec["platform"]["cloud_identity"]["aws_role_arn"] = "arn:aws:iam::111122223333:role/r"
    del spec["platform"]["postgres"]
    assert not _plan(spec).engine("big").gated


LLAMA_FILES = ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
               "model-00002-of-00002.safetensors", "model.safetensors.index.json", "original/consolidated.00.pth",
               "original/params.json", "original/tokenizer.model", "special_tokens_map.json", "tokenizer.json",
               "tokenizer_config.json", "LICENSE", "README.md"]
MISTRAL_FILES = ["config.json", "consolidated.safetensors", "model-00001-of-00003.safetensors",
                 "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json",
                 "params.json", "tokenizer.json", "tokenizer.model", "tokenizer.model.v3", "tokenizer_config.json"]


def test_hub_fetch_skips_the_original_checkpoint_beside_the_safetensors():
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    files = model_files(LLAMA_FILES, lambda: index)
    assert not [f for f in files if f.startswith("original/") or f.endswith(".pth")]
    assert {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "config.json",
            "tokenizer.json", "model.safetensors.index.json"} <= set(files)


def test_hub_fetch_takes_mistrals_consolidated_file_alone_as_vllm_loads_it():
    files = model_files(MISTRAL_FILES, lambda: pytest.fail("the index is not read when vLLM loads the Mistral format"))
    assert [f for f in files if f.endswith(".safetensors")] == ["consolidated.safetensors"]
    assert {"params.json", "tokenizer.model.v3", "config.json"} <= set(files)


def test_hub_fetch_without_an_index_takes_every_safetensors_file():
    files = model_files(["config.json", "model.safetensors", "pytorch_model.bin"], lambda: pytest.fail("no index"))
    assert files == ["model.safetensors", "config.json"]


def _cache_pod(engine, role: str, planned, hub_token: object | None):
    from tenantry.deploy.identity import bucket_access
    from tenantry.deploy.model_cache import CacheArgs, _pod_spec, engine_caches

    content = next(c for c in engine_caches(engine) if c.role == role)
    args = CacheArgs(namespace="tenantry", fetch_image="rclone", hub_image="vllm", access_mode="ReadWriteOnce",
                     storage_class=None, deadline_seconds=engine.pod.populate_seconds, hub_token=hub_token,
                     bucket_access=bucket_access(planned.platform), bucket_account=None,
                     node_selector={"node-restriction.kubernetes.io/tenantry-pool": engine.pool}, tolerations=[])
    return content, _pod_spec(content, args, hub_token if content.from_hub else None)


def test_adapters_from_the_hub_and_a_bucket_fill_one_claim_in_two_steps():
    spec = base_spec()
    spec["engines"][1]["adapters"][1]["source"] = "hf://beta-org/legal-lora@0123456789abcdef0123456789abcdef01234567"
    planned = _plan(spec)
    content, pod = _cache_pod(planned.engine("small"), "adapters", planned, hub_token=object())
    assert [c["name"] for c in pod["initContainers"]] == ["sync"] and [c["name"] for c in pod["containers"]] == ["hub"]
    assert json.loads(content.files["hub.json"]) == [{
        "destination": "/adapters/beta-legal", "repo": "beta-org/legal-lora",
        "revision": "0123456789abcdef0123456789abcdef01234567", "whole": True}]
    assert "s3,provider=AWS,env_auth=true:adapters/alpha/support" in content.files["fetch.sh"]
    assert pod["serviceAccountName"] == "tenantry-buckets"  # the bucket identity, for the rclone step
    hub = pod["containers"][0]
    assert {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"} in hub["env"]
    assert any(v.get("secret", {}).get("secretName") == "tenantry-hf-token" for v in pod["volumes"])
    assert "hf-token" not in [m["name"] for m in pod["initContainers"][0]["volumeMounts"]]


def test_weights_on_a_claim_are_copied_from_it_mounted_read_only_without_token_or_identity():
    spec = base_spec()
    spec["engines"][0]["source"] = "pvc://model-store/llama-3.1-70b"
    spec["engines"][0]["revision"] = "copy-2"
    planned = _plan(spec)
    content, pod = _cache_pod(planned.engine("big"), "weights", planned, hub_token=object())
    assert [c["name"] for c in pod["containers"]] == ["sync"] and "initContainers" not in pod
    assert "rclone copy --checksum --transfers 8 /sources/model-store/llama-3.1-70b /models/weights" in content.files[
        "fetch.sh"]
    assert {"name": "source-model-store", "persistentVolumeClaim": {"claimName": "model-store", "readOnly": True}} in (
        pod["volumes"])
    assert "serviceAccountName" not in pod and not any("secret" in v for v in pod["volumes"])
