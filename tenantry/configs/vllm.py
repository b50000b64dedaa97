"""vLLM's command line for one engine, every number from the Plan."""

from __future__ import annotations

from tenantry.plan.model import EnginePlan

PORT = 8000


def vllm_args(
    engine: EnginePlan, *, model: str, adapter_dir: str, download_dir: str | None, host: str = "0.0.0.0", port: int = PORT
) -> list[str]:
    """Arguments after `python3 -m vllm.entrypoints.openai.api_server`.

    `model` is the directory vLLM loads the weights from (on Kubernetes, the cache
    claim a Job filled at the pinned revision); `adapter_dir` holds one folder per adapter.
    Requests address the engine by its name and the adapters by theirs."""
    args = [
        "--model", model,
        "--served-model-name", engine.name,
        "--host", host,
        "--port", str(port),
        "--tensor-parallel-size", str(engine.tensor_parallel),
        "--max-model-len", str(engine.kv.max_context),
        "--gpu-memory-utilization", str(engine.gpu_memory_utilization),
        "--max-num-seqs", str(engine.kv.max_num_seqs),
        "--kv-cache-dtype", engine.kv_cache_dtype,
        # Lower numbers run first; the gateway sets each request's priority from its tenant's tier.
        "--scheduling-policy", "priority",
        "--enable-prefix-caching",
        # usage.prompt_tokens_details.cached_tokens: the gate proves cache isolation per request with it.
        # A tenant learns only about its own salt's cache (or, with isolation none, the shared one).
        "--enable-prompt-tokens-details",
    ]
    if download_dir:
        args += ["--download-dir", download_dir]
    if engine.quantize_on_load:
        args += ["--quantization", engine.weights]  # fp8 from the bf16 checkpoint, while loading
    elif engine.weights == "int4-awq":
        args += ["--quantization", "awq_marlin"]
    # A pre-quantised fp8 checkpoint declares its format; vLLM reads it from the config.
    if engine.placement == "cpu":
        # vLLM's CPU attention backend needs blocks of a multiple of 32 tokens and runs
        # without CUDA graphs (docs/decisions.md: CPU engines: KV blocks of 32 tokens, no CUDA graphs).
        args += ["--block-size", "32", "--enforce-eager"]
    if engine.lora.enabled:
        args += [
            "--enable-lora",
            "--max-loras", str(engine.lora.max_loras),
            "--max-lora-rank", str(engine.lora.max_lora_rank),
            "--max-cpu-loras", str(engine.lora.max_cpu_loras),
            "--lora-modules",
            *(f"{a.name}={adapter_dir}/{a.name}" for a in engine.lora.adapters),
        ]
    return args


def vllm_env(engine: EnginePlan) -> dict[str, str]:
    """Environment the engine needs beyond its arguments. On CPU the KV cache
    is sized by VLLM_CPU_KVCACHE_SPACE (whole GiB) instead of a share of GPU memory."""
    if engine.placement != "cpu":
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": str(max(1, engine.memory.kv_bytes // 2**30))}
