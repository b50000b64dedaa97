"""vLLM's command line for one engine, every number from the Plan."""

from __future__ import annotations

from tenantry.plan.model import EnginePlan

PORT = 8000
VLLM_SERVE = ["vllm", "serve"]
"""The engine's command; vllm_args() are its arguments (docs/decisions.md: Engines run vllm serve)."""

IDLE_CONNECTION_SECONDS = 3605
"""How long an engine's HTTP server keeps an idle keep-alive connection open. Longer than any client of it keeps
one in its pool: LiteLLM 15 s (GATEWAY_ENVIRONMENT), Envoy's upstream default of an hour for kv-aware engines.
A server that closes first (vLLM's default is 5 s) races a client reusing the connection at that moment, and the
request fails with "Connection reset by peer" (the local stack's gateway-killed scenario, 2026-12-04, 49 s after
the fault it was judging)."""

ENGINE_ENVIRONMENT = {
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(IDLE_CONNECTION_SECONDS),
    "VLLM_NO_USAGE_STATS": "1",
    # Adapters are the ones the spec lists, validated at plan time; none may be loaded at run time.
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "false",
}
"""What every engine runs with, on Kubernetes and on the local stack, besides what each place adds."""


def vllm_args(
    engine: EnginePlan, *, model: str, adapter_dir: str, host: str = "0.0.0.0", port: int = PORT
) -> list[str]:
    """Arguments after `vllm serve`, the model first: `vllm serve` takes it as its
    positional model tag (its --model is deprecated) (docs/decisions.md: Engines run vllm serve).

    `model` is the directory vLLM loads the weights from (on Kubernetes, the cache
    claim a Job filled at the pinned revision); `adapter_dir` holds one folder per adapter.
    Requests address the engine by its name and the adapters by theirs."""
    args = [
        model,
        "--served-model-name", engine.name,
        "--host", host,
        "--port", str(port),
        "--tensor-parallel-size", str(engine.tensor_parallel),
        *(["--pipeline-parallel-size", str(engine.pipeline_parallel)] if engine.pipeline_parallel > 1 else []),
        "--max-model-len", str(engine.kv.max_context),
        "--gpu-memory-utilization", str(engine.gpu_memory_utilization),
        "--max-num-seqs", str(engine.kv.max_num_seqs),
        "--kv-cache-dtype", engine.kv_cache_dtype,
        # The KV cache the Plan sized, in its blocks, instead of what vLLM would measure is left; on every
        # backend, so VLLM_CPU_KVCACHE_SPACE (whole GiB, overriding this flag) is never set
        # (docs/decisions.md: The engine's KV cache is the Plan's).
        "--kv-cache-memory-bytes", str(engine.memory.kv_bytes),
        "--block-size", str(engine.kv.block_size),
        # Lower numbers run first; the gateway sets each request's priority from its tenant's tier.
        "--scheduling-policy", "priority",
        "--enable-prefix-caching",
        # usage.prompt_tokens_details.cached_tokens: the gate proves cache isolation per request with it.
        # A tenant learns only about its own salt's cache (or, with isolation none, the shared one).
        "--enable-prompt-tokens-details",
    ]
    if engine.quantize_on_load:
        args += ["--quantization", engine.weights]  # fp8 from the bf16 checkpoint, while loading
    elif engine.weights == "int4-awq":
        args += ["--quantization", "awq_marlin"]
    # A pre-quantised fp8 checkpoint declares its format; vLLM reads it from the config.
    if engine.placement == "cpu":
        # vLLM's CPU backend runs without CUDA graphs (docs/decisions.md: CPU engines: KV blocks of 32
        # tokens, no CUDA graphs).
        args += ["--enforce-eager"]
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


MASTER_PORT = 29501
"""vLLM's default --master-port: the leader's torch.distributed store the stages meet at."""


def stage_args(engine: EnginePlan, *, rank: str, leader: str) -> list[str]:
    """What one pod of a replica spanning nodes adds to vllm_args(): vLLM's own multi-node serving over
    multiprocessing (docs/serving/parallelism_scaling.md of the pinned release: `--nnodes N --node-rank R
    --master-addr LEADER`, the others `--headless`), one pod per node and pipeline stage. `rank` is the
    pod's index in its group (0 for the leader, which serves the API), `leader` the leader's address
    (docs/decisions.md: Replicas across nodes are vLLM's own multi-node serving in a LeaderWorkerSet)."""
    args = ["--distributed-executor-backend", "mp", "--nnodes", str(engine.pipeline_parallel),
            "--node-rank", rank, "--master-addr", leader, "--master-port", str(MASTER_PORT)]
    return args if rank == "0" else [*args, "--headless"]
