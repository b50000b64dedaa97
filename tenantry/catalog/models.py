"""Model architectures tenantry can plan for.

Shapes come from each model's `config.json` on the Hugging Face Hub at the
pinned revision; total parameters from the safetensors index of that
revision (and they match `estimate_parameters` to the parameter). The
revisions are the commits the Hub served for the `-Instruct` repositories.
A model is gated when its card asks for access before download (Meta's
license gate; Mistral's `extra_gated_*` card fields).
"""

from __future__ import annotations

from dataclasses import dataclass

# Projections LoRA can adapt in a Llama-style decoder layer (the names PEFT
# and vLLM use). Attention first, then the MLP.
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
LORA_MODULES = ATTENTION_MODULES + MLP_MODULES


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """The shape of a decoder-only transformer, as far as memory planning needs it."""

    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    total_parameters: int
    max_context: int
    experts: int = 1
    """Experts per MoE layer (1 for a dense model)."""
    active_experts: int = 1
    """Experts each token is routed to."""
    tie_word_embeddings: bool = False
    qkv_bias: bool = False

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def active_parameters(self) -> int:
        """Parameters one token touches: compute follows these, memory follows the total."""
        if not self.is_moe:
            return self.total_parameters
        idle_experts = self.experts - self.active_experts
        return self.total_parameters - self.layers * idle_experts * 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_parameters(self) -> int:
        """Input embeddings plus the output head; kept in 16 bits by fp8 and AWQ."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def module_shape(self, module: str) -> tuple[int, int]:
        """(input features, output features) of one projection in one layer."""
        q_width = self.attention_heads * self.head_dim
        kv_width = self.kv_heads * self.head_dim
        return {
            "q_proj": (self.hidden_size, q_width),
            "k_proj": (self.hidden_size, kv_width),
            "v_proj": (self.hidden_size, kv_width),
            "o_proj": (q_width, self.hidden_size),
            "gate_proj": (self.hidden_size, self.intermediate_size),
            "up_proj": (self.hidden_size, self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
        }[module]

    def module_copies(self, module: str) -> int:
        """How many instances of a projection one layer holds: one per expert for the MLP of an MoE."""
        return self.experts if module in MLP_MODULES else 1


def estimate_parameters(arch: Architecture) -> int:
    """Parameters implied by the shape of a Llama-style decoder (embeddings,
    attention, gated MLP per expert, MoE router, RMSNorm weights, optional
    q/k/v biases). Used to catch a total that does not match its shape."""
    per_layer = sum(
        arch.module_copies(m) * arch.module_shape(m)[0] * arch.module_shape(m)[1] for m in LORA_MODULES
    )
    per_layer += 2 * arch.hidden_size  # input and post-attention RMSNorm
    if arch.qkv_bias:
        per_layer += (arch.attention_heads + 2 * arch.kv_heads) * arch.head_dim
    if arch.is_moe:
        per_layer += arch.hidden_size * arch.experts  # router
    return arch.layers * per_layer + arch.embedding_parameters + arch.hidden_size


@dataclass(frozen=True, kw_only=True)
class CatalogModel:
    name: str
    architecture: Architecture
    source: str
    """Where the weights come from (hf://<repo> or local://<recipe>)."""
    revision: str | None
    """The pinned commit (or, for a locally built model, the recipe version); None where tenantry's catalog
    knows the shape but was written without the Hub to read a commit from: an engine must pin its own."""
    gated: bool = False
    """The Hub repository asks for access on its model card: downloads need a token of an account granted it."""


CATALOG_MODELS: dict[str, CatalogModel] = {
    m.name: m
    for m in (
        CatalogModel(
            name="llama-3.1-8b",
            architecture=Architecture(
                layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, head_dim=128,
                intermediate_size=14336, vocab_size=128256, total_parameters=8_030_261_248,
                max_context=131072,
            ),
            source="hf://meta-llama/Llama-3.1-8B-Instruct", revision="0e9e39f249a16976918f6564b8830bc894c89659",
            gated=True,
        ),
        CatalogModel(
            name="llama-3.1-70b",
            architecture=Architecture(
                layers=80, hidden_size=8192, attention_heads=64, kv_heads=8, head_dim=128,
                intermediate_size=28672, vocab_size=128256, total_parameters=70_553_706_496,
                max_context=131072,
            ),
            source="hf://meta-llama/Llama-3.1-70B-Instruct", revision="1605565b47bb9346c5515c34102e054115b4f98b",
            gated=True,
        ),
        CatalogModel(
            name="llama-3.2-3b",
            architecture=Architecture(
                layers=28, hidden_size=3072, attention_heads=24, kv_heads=8, head_dim=128,
                intermediate_size=8192, vocab_size=128256, total_parameters=3_212_749_824,
                max_context=131072, tie_word_embeddings=True,
            ),
            source="hf://meta-llama/Llama-3.2-3B-Instruct", revision="0cb88a4f764b7a12671c53f0838cd831a0843b95",
            gated=True,
        ),
        CatalogModel(
            # Larger than one 8-GPU node of 80 GB in bf16 (812 GB of weights): served across nodes, tensor
            # parallel inside each and pipeline parallel between them. Shape from the Hub's config.json; the
            # total is what that shape implies (the same as estimate_parameters, to the parameter). No pinned
            # revision: the engine gives one (see `revision` above).
            name="llama-3.1-405b",
            architecture=Architecture(
                layers=126, hidden_size=16384, attention_heads=128, kv_heads=8, head_dim=128,
                intermediate_size=53248, vocab_size=128256, total_parameters=405_853_388_800,
                max_context=131072,
            ),
            source="hf://meta-llama/Llama-3.1-405B-Instruct", revision=None, gated=True,
        ),
        CatalogModel(
            name="qwen2.5-7b",
            architecture=Architecture(
                layers=28, hidden_size=3584, attention_heads=28, kv_heads=4, head_dim=128,
                intermediate_size=18944, vocab_size=152064, total_parameters=7_615_616_512,
                max_context=32768, qkv_bias=True,
            ),
            source="hf://Qwen/Qwen2.5-7B-Instruct", revision="a09a35458c702b33eeacc393d103063234e8bc28",
        ),
        CatalogModel(
            name="qwen2.5-32b",
            architecture=Architecture(
                layers=64, hidden_size=5120, attention_heads=40, kv_heads=8, head_dim=128,
                intermediate_size=27648, vocab_size=152064, total_parameters=32_763_876_352,
                max_context=32768, qkv_bias=True,
            ),
            source="hf://Qwen/Qwen2.5-32B-Instruct", revision="5ede1c97bbab6ce5cda5812749b4c0bdf79b18dd",
        ),
        CatalogModel(
            name="qwen2.5-72b",
            architecture=Architecture(
                layers=80, hidden_size=8192, attention_heads=64, kv_heads=8, head_dim=128,
                intermediate_size=29568, vocab_size=152064, total_parameters=72_706_203_648,
                max_context=32768, qkv_bias=True,
            ),
            source="hf://Qwen/Qwen2.5-72B-Instruct", revision="495f39366efef23836d0cfae4fbe635880d2be31",
        ),
        CatalogModel(
            name="mistral-7b",
            architecture=Architecture(
                layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, head_dim=128,
                intermediate_size=14336, vocab_size=32768, total_parameters=7_248_023_552,
                max_context=32768,
            ),
            source="hf://mistralai/Mistral-7B-Instruct-v0.3", revision="e0bc86c23ce5aae1db576c8cca6f06f1f73af2db",
            gated=True,
        ),
        CatalogModel(
            # MoE: every expert stays resident, so memory follows the 46.7B
            # total while compute follows the ~12.9B a token touches.
            name="mixtral-8x7b",
            architecture=Architecture(
                layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, head_dim=128,
                intermediate_size=14336, vocab_size=32000, total_parameters=46_702_792_704,
                max_context=32768, experts=8, active_experts=2,
            ),
            source="hf://mistralai/Mixtral-8x7B-Instruct-v0.1", revision="41bd4c9e7e4fb318ca40e721131d4933966c2cc1",
        ),
        CatalogModel(
            # Built by the local stack with random weights (no download): two
            # layers with grouped-query attention, so KV and LoRA arithmetic
            # have the same structure as the real models'. Head dim 64 is one
            # the CPU attention backend supports.
            name="tenantry-tiny",
            architecture=Architecture(
                layers=2, hidden_size=256, attention_heads=4, kv_heads=2, head_dim=64,
                intermediate_size=512, vocab_size=2048, total_parameters=2_229_504,
                max_context=2048,
            ),
            source="local://tenantry-tiny", revision="recipe-2",
        ),
        CatalogModel(
            # The local stack's second, smaller engine (the fallback target).
            name="tenantry-micro",
            architecture=Architecture(
                layers=1, hidden_size=128, attention_heads=2, kv_heads=1, head_dim=64,
                intermediate_size=256, vocab_size=2048, total_parameters=672_128,
                max_context=2048,
            ),
            source="local://tenantry-micro", revision="recipe-2",
        ),
    )
}


def catalog_model(name: str) -> CatalogModel | None:
    return CATALOG_MODELS.get(name)


def is_gated(source: str) -> bool:
    """Whether a source is a catalog repository whose downloads need a Hub token."""
    return any(m.gated and m.source == source for m in CATALOG_MODELS.values())
