"""Build a tiny model and its LoRA adapters without downloading anything.

Runs inside the engines' environment (.venv-vllm: torch, transformers, peft,
tokenizers), standalone: `python build_model.py JOB.json`. The job names the
architecture (from tenantry's catalog), the output folder, the seed and the
adapters. Everything is seeded, so the same job gives the same files.

The weights are random, so the text is gibberish; the serving mechanics
(batching, KV cache, prefix caching, priorities, LoRA) are the real ones.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

# A chat template vLLM can render for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
WORDS = (
    "tenant gateway engine model adapter budget quota priority cache salt token prompt output latency "
    "throughput request response batch queue slot memory cluster node pool replica spend key team tier "
    "guaranteed spot effort admission metric alert runbook legal support code extract research summary "
    "the a of to and in for on with is are was be by at from this that it as an or not can will"
).split()


def corpus(seed: int, lines: int = 600) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24))) for _ in range(lines)]


def build_tokenizer(out: Path, vocab_size: int, seed: int, max_context: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>",
        model_max_length=max_context,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build(job: dict[str, Any]) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    arch, out, seed = job["architecture"], Path(job["model_dir"]), job["seed"]
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, arch["vocab_size"], seed, arch["max_context"])
    config = LlamaConfig(
        vocab_size=arch["vocab_size"], hidden_size=arch["hidden_size"], intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["layers"], num_attention_heads=arch["attention_heads"],
        num_key_value_heads=arch["kv_heads"], head_dim=arch["head_dim"], max_position_embeddings=arch["max_context"],
        tie_word_embeddings=arch["tie_word_embeddings"], bos_token_id=1, eos_token_id=2, pad_token_id=2,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    if parameters != arch["total_parameters"]:
        raise SystemExit(f"built {parameters} parameters, the catalog says {arch['total_parameters']}")
    model.save_pretrained(out, safe_serialization=True)

    for adapter in job["adapters"]:
        torch.manual_seed(adapter["seed"])
        base = LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.bfloat16)
        lora = LoraConfig(r=adapter["rank"], lora_alpha=2 * adapter["rank"], target_modules=adapter["target_modules"],
                          lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", init_lora_weights=False)
        # bf16 like the base: the planner sizes adapters at two bytes per weight.
        peft_model = get_peft_model(base, lora, autocast_adapter_dtype=False)
        peft_model.save_pretrained(adapter["dir"], safe_serialization=True)
    (out / "tenantry-recipe.json").write_text(json.dumps(job, indent=2, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    build(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
