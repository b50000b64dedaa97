"""Build a tiny model and its LoRA adapters without downloading anything.

Runs inside the engines' environment (.venv-vllm: torch, transformers, peft,
tokenizers), standalone: `python build_model.py JOB.json`. The job names the
architecture (from tenantry's catalog), the output folder, the seed and the
adapters. Everything is seeded, so the same job gives the same files.

The weights are random, so the text is gibberish; the serving mechanics
(batching, KV cache, prefix caching, priorities, LoRA) are the real ones.
"""

from __future__ import annotations

import itertools
import json
import string
import sys
from pathlib import Path
from typing import Any

# A chat template vLLM can render for /v1/chat/completions, in plain words: every
# token of the vocabulary is ordinary text, so none vanishes when decoded.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
EOS = "</s>"
UNKNOWN = "<unk>"
CONTINUATION = "##"
WORDS = (
    "tenant gateway engine model adapter budget quota priority cache salt token prompt output latency "
    "throughput request response batch queue slot memory cluster node pool replica spend key team tier "
    "guaranteed spot effort admission metric alert runbook legal support code extract research summary "
    "the a of to and in for on with is are was be by at from this that it as an or not can will "
    "system user assistant hello question answer"
).split()
"""Whole-word tokens: the gate's prompts are made of these words, one token each."""


def vocabulary(size: int) -> dict[str, int]:
    """Exactly `size` tokens, each of them visible text, so that whatever id the
    random weights pick decodes to something a reader sees: the end-of-sequence
    token, the unknown token (as the text `<unk>`, not a special token), every
    printable ASCII character as a word start and as a continuation (any ASCII
    text can be encoded), the words above, then letter pairs, triples, ... as
    word starts and continuations until the vocabulary is full."""

    def pieces():
        yield EOS
        yield UNKNOWN
        characters = [chr(c) for c in range(33, 127)]
        yield from characters
        yield from (CONTINUATION + c for c in characters)
        yield from WORDS
        for length in itertools.count(2):
            for letters in itertools.product(string.ascii_lowercase, repeat=length):
                yield "".join(letters)
                yield CONTINUATION + "".join(letters)

    vocab: dict[str, int] = {}
    for piece in pieces():
        if len(vocab) == size:
            return vocab
        vocab.setdefault(piece, len(vocab))
    raise AssertionError("unreachable: the pieces never run out")


def build_tokenizer(out: Path, vocab_size: int, max_context: int) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordPiece(vocabulary(vocab_size), unk_token=UNKNOWN,
                                           continuing_subword_prefix=CONTINUATION))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # No clean-up: it would rewrite text already streamed (" ." becomes ".").
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION, cleanup=False)
    tokenizer.add_special_tokens([AddedToken(EOS, special=True, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS,
                                   model_max_length=max_context)
    fast.chat_template = CHAT_TEMPLATE
    invisible = [i for i in range(vocab_size) if i != fast.eos_token_id
                 and not any(c.isprintable() and not c.isspace() for c in fast.decode([i], skip_special_tokens=True))]
    if len(fast) != vocab_size or invisible:
        raise SystemExit(f"tokenizer of {len(fast)} tokens for a vocabulary of {vocab_size}; "
                         f"ids decoding to no visible text: {invisible[:10]}")
    fast.save_pretrained(out)
    return fast


def build(job: dict[str, Any]) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    arch, out, seed = job["architecture"], Path(job["model_dir"]), job["seed"]
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out, arch["vocab_size"], arch["max_context"])
    config = LlamaConfig(
        vocab_size=arch["vocab_size"], hidden_size=arch["hidden_size"], intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["layers"], num_attention_heads=arch["attention_heads"],
        num_key_value_heads=arch["kv_heads"], head_dim=arch["head_dim"], max_position_embeddings=arch["max_context"],
        tie_word_embeddings=arch["tie_word_embeddings"], bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
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
