"""Policies on what engines run and fetch, checked against the Plan."""

from __future__ import annotations

from tenantry.manifests.resources import Resource, containers, pod_spec, quantity_bytes, volume_size
from tenantry.plan.model import Plan


def engines_match_the_plan(resources: list[Resource], plan: Plan) -> list[str]:
    """GPU requests and vLLM's arguments are exactly what the Plan decided."""
    from tenantry.deploy.engine import ADAPTERS_DIR, MODELS_DIR
    from tenantry.configs.vllm import model_reference, vllm_args

    violations = []
    deployments = {r.metadata.get("name"): r for r in resources if r.kind == "Deployment"}
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        if deployment is None:
            violations.append(f"engine {engine.name} has no Deployment")
            continue
        vllm = next((c for c in containers(deployment) if c.get("name") == "vllm"), {})
        hub = engine.source.startswith("hf://")
        expected = vllm_args(engine, model=model_reference(engine, f"{MODELS_DIR}/weights"), adapter_dir=ADAPTERS_DIR,
                             download_dir=MODELS_DIR if hub else None)
        if vllm.get("args") != expected:
            violations.append(f"{deployment.label} runs vLLM with {vllm.get('args')}, the plan says {expected}")
        limits = (vllm.get("resources") or {}).get("limits") or {}
        gpus = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
        wanted = {engine.gpu_resource: str(engine.gpu_resource_count)} if engine.gpu_resource else {}
        if gpus != wanted:
            violations.append(f"{deployment.label} requests {gpus}, the plan says {wanted}")
        if (deployment.props.get("spec") or {}).get("replicas") != engine.replicas:
            violations.append(f"{deployment.label} has {deployment.props['spec'].get('replicas')} replicas, "
                              f"the plan says {engine.replicas}")
    return violations


def engine_volumes_hold_their_checkpoint(resources: list[Resource], plan: Plan) -> list[str]:
    """The volume an engine downloads its weights into holds the checkpoint as
    downloaded: the bf16 one when vLLM quantises it while loading."""
    from tenantry.deploy.engine import MODELS_DIR
    from tenantry.units import human_bytes

    violations = []
    deployments = {r.metadata.get("name"): r for r in resources if r.kind == "Deployment"}
    claims = {r.metadata.get("name"): r.props.get("spec") for r in resources if r.kind == "PersistentVolumeClaim"}
    for engine in plan.engines:
        deployment = deployments.get(engine.name)
        if deployment is None:
            continue  # engines_match_the_plan names it
        vllm = next((c for c in containers(deployment) if c.get("name") == "vllm"), {})
        mount = next((m.get("name") for m in vllm.get("volumeMounts") or [] if m.get("mountPath") == MODELS_DIR), None)
        volume = next((v for v in (pod_spec(deployment) or {}).get("volumes") or [] if v.get("name") == mount), None)
        size = volume_size(volume, claims) if volume else None
        size_bytes = quantity_bytes(size) if size is not None else None
        if size_bytes is None or size_bytes < engine.pod.download_bytes:
            dtype = "bf16" if engine.quantize_on_load else engine.weights
            violations.append(f"{deployment.label} downloads {human_bytes(engine.pod.download_bytes)} of {dtype} "
                              f"{engine.model} weights into {MODELS_DIR}, whose volume holds {size or 'no stated size'}")
    return violations
