"""Engines' weights live in cache claims filled once, for every shipped stack:
each claim holds what its Job fetches, a Job per model revision, the Hub token
only in the Jobs that fetch from the Hub, engines offline and waiting for
their Jobs, and nothing but the Jobs let out."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tenantry.deploy.common import COMPONENT_LABEL, ENGINE_LABEL
from tenantry.deploy.model_cache import (CACHE_COMPONENT, FETCH_MEMORY_BYTES, HF_TOKEN_SECRET, REPLACE_UNREADY_ANNOTATION,
                                         TIMEOUT_ANNOTATION, XET_BUFFER_LIMIT_BYTES, XET_DOWNLOAD_BUFFERS,
                                         engine_caches)
from tenantry.manifests.resources import quantity_bytes
from tenantry.stacks import plan_stack, stack_path
from tests.manifests.tampering import shared_render

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.stem for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


@pytest.fixture(scope="module", params=STACKS)
def rendered(request):
    return plan_stack(request.param), shared_render(request.param)


def _objects(rendering, kind: str) -> dict[str, Any]:
    return {r.inputs["metadata"]["name"]: r for r in rendering.resources if r.is_kubernetes and r.kind == kind}


def _pods(workload) -> list[dict[str, Any]]:
    """Its pod specs: a LeaderWorkerSet's leader's and its workers' (an engine across nodes), else its one."""
    spec = workload.inputs["spec"]
    if workload.kind == "LeaderWorkerSet":
        return [spec["leaderWorkerTemplate"][t]["spec"] for t in ("leaderTemplate", "workerTemplate")]
    return [spec["template"]["spec"]]


def _pod(workload) -> dict[str, Any]:
    return _pods(workload)[0]


def _engines(rendering) -> dict[str, Any]:
    """What runs each engine, by name: a Deployment, or a LeaderWorkerSet across nodes."""
    return {**_objects(rendering, "Deployment"), **_objects(rendering, "LeaderWorkerSet")}


def _cache_jobs(rendering, engine: str) -> dict[str, Any]:
    return {n: j for n, j in _objects(rendering, "Job").items()
            if j.inputs["metadata"]["labels"].get(ENGINE_LABEL) == engine}


def _claims_mounted(deployment, pod: dict[str, Any] | None = None) -> dict[str, str]:
    """Mount path -> claim of the vLLM container (of `pod`, one of its pod specs; its first by default)."""
    pod = pod or _pod(deployment)
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in pod["volumes"] if "persistentVolumeClaim" in v}
    vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
    return {m["mountPath"]: claims[m["name"]] for m in vllm["volumeMounts"] if m["name"] in claims}


def test_each_engine_mounts_claims_that_hold_what_it_reads(rendered):
    plan, rendering = rendered
    claims, deployments = _objects(rendering, "PersistentVolumeClaim"), _engines(rendering)
    for engine in plan.engines:
        mounted = _claims_mounted(deployments[engine.name])
        # Every stage of a replica across nodes reads the same claims.
        assert all(_claims_mounted(deployments[engine.name], pod) == mounted for pod in _pods(deployments[engine.name]))
        weights = claims[mounted["/models"]].inputs["spec"]
        assert quantity_bytes(weights["resources"]["requests"]["storage"]) >= engine.pod.download_bytes
        assert weights["accessModes"] == [plan.platform.model_cache_access_mode]
        if engine.lora.adapters:
            adapters = claims[mounted["/adapters"]].inputs["spec"]["resources"]["requests"]["storage"]
            assert quantity_bytes(adapters) >= sum(a.bytes for a in engine.lora.adapters)
        else:
            assert "/adapters" not in mounted


def test_one_job_fills_each_claim_and_its_name_follows_the_revision(rendered):
    plan, rendering = rendered
    deployments = _engines(rendering)
    for engine in plan.engines:
        jobs = _cache_jobs(rendering, engine.name)
        filled = {v["persistentVolumeClaim"]["claimName"] for j in jobs.values() for v in _pod(j)["volumes"]
                  if v["name"] == "cache"}
        assert filled == set(_claims_mounted(deployments[engine.name]).values()) == set(jobs)
        assert all(j.inputs["spec"]["activeDeadlineSeconds"] == engine.pod.populate_seconds for j in jobs.values())
        assert all(j.inputs["metadata"]["annotations"][TIMEOUT_ANNOTATION] == str(engine.pod.populate_seconds)
                   for j in jobs.values())
        # A Job past its deadline is Failed for good; this has the next `pulumi up` replace it (pulumi-kubernetes'
        # Diff reads the live Job and schedules a replacement when it is not complete), resuming the fetch.
        assert all(j.inputs["metadata"]["annotations"][REPLACE_UNREADY_ANNOTATION] == "true" for j in jobs.values())
        other_revision = dataclasses.replace(engine, revision="0" * 40)
        weights, revised = engine_caches(engine)[0], engine_caches(other_revision)[0]
        assert weights.name in jobs and revised.name != weights.name and len(revised.name) <= 63
        if engine.lora.adapters:
            assert engine_caches(other_revision)[1].name == engine_caches(engine)[1].name


def test_hub_token_only_in_the_jobs_that_fetch_from_the_hub(rendered):
    plan, rendering = rendered
    hub_engines = {e.name for e in plan.engines if e.source.startswith("hf://")}
    secrets = _objects(rendering, "Secret")
    assert (HF_TOKEN_SECRET in secrets) == bool(hub_engines)
    for name, workload in {**_objects(rendering, "Job"), **_engines(rendering),
                           **_objects(rendering, "StatefulSet")}.items():
        for pod in _pods(workload):
            mounts_token = any((v.get("secret") or {}).get("secretName") == HF_TOKEN_SECRET for v in pod["volumes"])
            fetches_hub = any(c["name"] == "hub" for c in [*pod.get("initContainers", []), *pod["containers"]])
            assert mounts_token == fetches_hub, name
            if fetches_hub:
                assert workload.kind == "Job" and workload.inputs["metadata"]["labels"][ENGINE_LABEL] in hub_engines


def test_a_hub_fetch_bounds_hf_xets_buffers_below_its_memory(rendered):
    """hf_xet's defaults buffer 2 GB plus 512 MB per file at once (up to 8 GB) in a 2 GiB container: every container
    that fetches from the Hub bounds them, with over a GiB left for the interpreter and the client."""
    plan, rendering = rendered
    hub_containers = [(name, c) for name, job in _objects(rendering, "Job").items() for pod in _pods(job)
                      for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == "hub"]
    assert bool(hub_containers) == any(e.source.startswith("hf://") for e in plan.engines)
    for name, container in hub_containers:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: env.get(k) for k in XET_DOWNLOAD_BUFFERS} == XET_DOWNLOAD_BUFFERS, name
        assert "HF_XET_HIGH_PERFORMANCE" not in env  # its defaults are 16 GB of buffers and more
        memory = quantity_bytes(container["resources"]["limits"]["memory"])
        assert memory == FETCH_MEMORY_BYTES and memory - XET_BUFFER_LIMIT_BYTES > 2**30, name
        assert env["HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_LIMIT"] == "768mb"  # as hf_xet reads it: 768 MiB


def test_engines_run_offline_from_their_claims(rendered):
    plan, rendering = rendered
    deployments = _engines(rendering)
    for engine in plan.engines:
        for pod in _pods(deployments[engine.name]):  # every stage's, across nodes
            assert "initContainers" not in pod
            vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
            env = {e["name"]: e.get("value") for e in vllm["env"]}
            assert (env["HF_HUB_OFFLINE"], env["TRANSFORMERS_OFFLINE"], env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]) == (
                "1", "1", "false")
            assert "HF_TOKEN_PATH" not in env
            assert "/models/weights" in vllm["args"] and not {"--revision", "--download-dir"} & set(vllm["args"])
            assert all(m.get("readOnly") for m in vllm["volumeMounts"] if m["mountPath"] in ("/models", "/adapters"))
        assert int(deployments[engine.name].inputs["metadata"]["annotations"][TIMEOUT_ANNOTATION]) > (
            engine.pod.startup_seconds)


def test_engines_wait_for_their_jobs_and_jobs_for_their_claims(rendered):
    plan, rendering = rendered
    urns = {(r.kind, r.inputs["metadata"]["name"]): r.urn for r in rendering.resources if r.is_kubernetes
            and "metadata" in r.inputs}
    deployments = _engines(rendering)
    for engine in plan.engines:
        jobs = _cache_jobs(rendering, engine.name)
        assert set(deployments[engine.name].dependencies) >= {j.urn for j in jobs.values()}
        for name, job in jobs.items():
            needs = {urns[("PersistentVolumeClaim", name)], urns[("ConfigMap", name)]}
            if any(c["name"] == "hub" for c in _pod(job)["containers"] + _pod(job).get("initContainers", [])):
                needs.add(urns[("Secret", HF_TOKEN_SECRET)])
            if _pod(job).get("serviceAccountName"):
                needs.add(urns[("ServiceAccount", _pod(job)["serviceAccountName"])])
            assert set(job.dependencies) >= needs, name


def test_only_the_cache_jobs_reach_out(rendered):
    _, rendering = rendered
    policies = {n: p.inputs["spec"] for n, p in _objects(rendering, "NetworkPolicy").items()
                if p.inputs["spec"]["policyTypes"] == ["Egress"] and p.inputs["metadata"]["namespace"] == "tenantry"}
    engines = policies["tenantry-engines-egress"]
    assert engines["podSelector"] == {"matchLabels": {COMPONENT_LABEL: "engine"}}
    assert [p["port"] for rule in engines["egress"] for p in rule["ports"]] == [53, 53]
    caches = policies["tenantry-model-cache-egress"]
    assert caches["podSelector"] == {"matchLabels": {COMPONENT_LABEL: CACHE_COMPONENT}}
    assert {"ports": [{"protocol": "TCP", "port": 443}]} in caches["egress"]
