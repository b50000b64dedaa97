"""Engines: one model deployment each, where its replicas run, its limits, and its LoRA adapters."""

from __future__ import annotations

from pydantic import model_validator

from tenantry.spec.fields import (
    KvCacheDtype,
    LoraModule,
    ModelName,
    Name,
    Revision,
    Routing,
    SourceUri,
    SpecModel,
    WeightDtype,
    field,
)


class ArchitectureSpec(SpecModel):
    """The shape of a model that is not in the catalog."""

    layers: int = field(description="Decoder layers.", ge=1, le=1000)
    hidden_size: int = field(description="Hidden (model) dimension.", ge=1, le=1_000_000)
    attention_heads: int = field(description="Query attention heads.", ge=1, le=10_000)
    kv_heads: int = field(description="Key/value heads (fewer than attention heads with GQA).", ge=1, le=10_000)
    head_dim: int = field(description="Dimension of one attention head.", ge=1, le=10_000)
    intermediate_size: int = field(description="MLP intermediate dimension (per expert for MoE).", ge=1, le=10_000_000)
    vocab_size: int = field(description="Vocabulary size (embeddings stay 16-bit when weights are quantised).", ge=1, le=10_000_000)
    total_parameters: int = field(
        description="All parameters, every expert included: weight memory follows this.",
        unit="parameters", ge=1, le=100_000_000_000_000,
    )
    max_context: int = field(description="Longest context the model supports.", unit="tokens", ge=16, le=10_000_000)
    experts: int = field(1, description="Experts per MoE layer; 1 for a dense model.", ge=1, le=1024)
    active_experts: int = field(1, description="Experts each token is routed to.", ge=1, le=1024)
    tie_word_embeddings: bool = field(False, description="Whether the output head shares the input embeddings.")
    qkv_bias: bool = field(False, description="Whether q/k/v projections carry biases (Qwen2.5 does).")

    @model_validator(mode="after")
    def _shape(self) -> ArchitectureSpec:
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.active_experts > self.experts:
            raise ValueError(f"active_experts ({self.active_experts}) exceeds experts ({self.experts})")
        return self


class PlacementSpec(SpecModel):
    pool: Name = field(description="Node pool the engine runs on.")
    tensor_parallel: int = field(
        1, description="GPUs one replica spans (whole-GPU pools only; must divide the GPUs of a node).",
        unit="GPUs", ge=1, le=16,
    )
    pipeline_parallel: int = field(
        1, description="Nodes one replica spans: pipeline stages of tensor_parallel GPUs each, one node per stage "
        "(vLLM's multi-node serving over Ray, deployed as a LeaderWorkerSet: a leader and pipeline_parallel - 1 "
        "workers per replica). Whole-GPU pools only, with tensor_parallel the GPUs of a node.",
        unit="nodes", ge=1, le=64,
    )
    mig_profile: str | None = field(
        None, description="MIG profile one replica runs in (MIG pools only), for example 1g.20gb."
    )


class ThroughputOverrideSpec(SpecModel):
    """Measured throughput of one replica, replacing the catalog estimate."""

    prefill_tokens_per_second: float = field(
        description="Prompt tokens one replica processes per second at full load.", unit="tokens/s", gt=0, le=1e9
    )
    decode_tokens_per_second: float = field(
        description="Output tokens one replica generates per second at full load.", unit="tokens/s", gt=0, le=1e9
    )


class AdapterSpec(SpecModel):
    """A LoRA adapter served by its base engine."""

    name: Name = field(description="Adapter name: the model name tenants request it by.")
    base_model: ModelName = field(description="Base model it was trained on; must be the engine's model.")
    base_revision: Revision = field(description="Revision of that base model; must be the engine's revision.")
    rank: int = field(description="LoRA rank r.", ge=1, le=256)
    target_modules: list[LoraModule] = field(
        description="Projections the adapter modifies (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).",
        min_length=1, max_length=7,
    )
    source: SourceUri = field(
        description="Where the adapter's files are: hf://org/repo@revision, s3://bucket/path, gs://bucket/path, "
        "pvc://claim/path, or local://path (the local stack's artifacts)."
    )
    tenant: Name = field(description="The tenant that owns the adapter; only it may be allowed to use it.")


class LoraSpec(SpecModel):
    max_loras: int | None = field(
        None, description="Adapters that can be in one batch (vLLM --max-loras); omit to let the planner "
        "choose what fits in gpu_memory_fraction.", unit="adapters", ge=1, le=1024,
    )
    gpu_memory_fraction: float = field(
        0.10, description="Share of the memory left after weights and reserve that adapter slots may take "
        "from the KV cache.", unit="fraction", gt=0, le=0.9,
    )
    cpu_cache_gib: float = field(
        16.0, description="Host memory each replica may use to keep adapters warm (sets --max-cpu-loras).",
        unit="GiB", gt=0, le=4096,
    )


class AutoscalingSpec(SpecModel):
    """Replicas between the engine's `replicas` and `max_replicas`, scaled by KEDA on vLLM's own signals."""

    max_replicas: int = field(
        description="Most replicas the autoscaler may run; the engine's `replicas` is its floor, which the Plan "
        "reserves guaranteed slots on. The pool must have GPUs for this many.", ge=1, le=256,
    )


class EngineSpec(SpecModel):
    """One model deployment (a vLLM Deployment with replicas)."""

    name: Name = field(description="Engine name: the model name tenants request and the Kubernetes name.")
    model: ModelName = field(
        description="Base model: a catalog name (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, llama-3.2-3b, "
        "qwen2.5-7b, qwen2.5-32b, qwen2.5-72b, mistral-7b, mixtral-8x7b, tenantry-tiny, tenantry-micro) or, with "
        "`architecture`, a name of your own.",
    )
    architecture: ArchitectureSpec | None = field(None, description="Shape of a model that is not in the catalog.")
    revision: Revision | None = field(
        None, description="Pinned revision of the weights; defaults to the catalog's pin. Required with `architecture`."
    )
    source: SourceUri | None = field(
        None, description="Where the weights are; defaults to the catalog's. Required with `architecture`."
    )
    weights: WeightDtype = field("bf16", description="Weight format: bf16, fp8, or int4-awq.")
    kv_cache_dtype: KvCacheDtype = field(
        "auto", description="KV cache format: auto (16-bit, as the activations) or fp8 (half the bytes)."
    )
    max_context: int | None = field(
        None, description="Longest sequence (prompt + output) served; defaults to the smaller of 8192 and "
        "the model's maximum.", unit="tokens", ge=16, le=10_000_000,
    )
    placement: PlacementSpec = field(description="Where replicas run: a pool, and a TP size or a MIG profile.")
    replicas: int = field(1, description="Identical replicas behind the engine's Service (with `autoscaling`, the "
                          "fewest it runs).", ge=1, le=256)
    autoscaling: AutoscalingSpec | None = field(
        None, description="Scale replicas from `replicas` up to `max_replicas` on the engine's waiting requests, KV "
        "cache use and time to first token (KEDA's Prometheus scaler, pinned); none: a fixed count.",
    )
    routing: Routing = field(
        "service", description="How the gateway reaches the replicas: service (the engine's Service spreads "
        "requests over them) or kv-aware (an inference Gateway whose endpoint picker, llm-d's, sends each request to "
        "the replica that already holds its prompt's prefix and has room, each tenant's tier as the picker's "
        "objective; Kubernetes GPU pools only).",
    )
    gpu_memory_utilization: float = field(
        0.90, description="Share of each GPU's memory the engine may claim (vLLM --gpu-memory-utilization).",
        unit="fraction", gt=0.05, le=1.0,
    )
    runtime_reserve_fraction: float = field(
        0.10, description="Share of each GPU's memory the planner keeps inside that claim for activations, "
        "CUDA graphs and the runtime; the rest after weights is KV cache.", unit="fraction", ge=0, le=0.5,
    )
    max_num_seqs: int = field(
        256, description="Upper bound on sequences batched together; the planner lowers it to what the KV "
        "cache holds at the tenants' typical context.", unit="sequences", ge=1, le=4096,
    )
    throughput: ThroughputOverrideSpec | None = field(
        None, description="Measured throughput per replica, replacing the catalog's estimate."
    )
    lora: LoraSpec = field(default_factory=LoraSpec, description="LoRA serving limits.")
    adapters: list[AdapterSpec] = field(default_factory=list, description="LoRA adapters served on this base.")
