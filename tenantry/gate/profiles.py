"""What one request of each traffic profile looks like.

chat     short prompt from the tenant's typical length, streamed
rag      a long prompt: a document shared by all the tenant's requests (a prefix
         the engine can cache) and a question of its own, streamed
batch    an extraction prompt, not streamed
adapter  the tenant's LoRA adapter, shaped as the traffic entry's profile says

Prompts are words from a fixed list, drawn from a seed: the run's own (a
fresh draw each run, so no prompt is in an engine's prefix cache from an
earlier run), or the same for every run when the scenario repeats prompts.
The model's own count of prompt tokens comes back in the usage. Outputs run to
exactly the tenant's typical length (`ignore_eos`, vLLM's own field), so
token rates compare across runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tenantry.plan.model import Plan, TenantPlan, TrafficPlan

# Words that are one token each for the local models' tokenizer (and for Llama's and GPT's), so a
# prompt of N words is about N tokens plus the chat template.
WORDS = "tenant gateway engine model adapter budget priority cache salt token prompt output request batch summary".split()
RAG_DOCUMENT_SHARE = 0.75
"""Of a RAG prompt, the share that is the tenant's shared document."""


@dataclass(frozen=True)
class TrafficClass:
    """One Locust user class: a tenant's traffic of one profile, over its targets."""

    tenant: str
    profile: str
    targets: tuple[TrafficPlan, ...]

    @property
    def name(self) -> str:
        return f"{self.tenant}-{self.profile}"

    @property
    def share(self) -> float:
        return sum(t.share for t in self.targets)


def traffic_classes(plan: Plan) -> list[TrafficClass]:
    """A tenant's traffic entries grouped by profile; adapter traffic is its own class."""
    classes = []
    for tenant in plan.tenants:
        grouped: dict[str, list[TrafficPlan]] = {}
        for entry in tenant.traffic:
            grouped.setdefault("adapter" if entry.adapter else entry.profile, []).append(entry)
        classes += [TrafficClass(tenant.name, profile, tuple(entries)) for profile, entries in grouped.items()]
    return classes


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, count)))


def rag_document(tenant: str, length: int, run_seed: str = "") -> str:
    """The tenant's shared document: the same on every request of the run."""
    return words(random.Random(f"{run_seed}rag:{tenant}"), int(length * RAG_DOCUMENT_SHARE))


def answer_tokens(tenant: TenantPlan, output_scale: float = 1.0) -> int:
    """The answer's length the gate asks of the tenant: `output_scale` times its typical, within its tier's cap."""
    wanted = max(1, round(tenant.typical_output_tokens * output_scale))
    return min(wanted, tenant.max_output_tokens or wanted)


def longest_answer(plan: Plan, targets: set[str], scale_of) -> tuple[TenantPlan, TrafficPlan, int] | None:
    """The tenant asked the longest answers (`scale_of(tenant name)` times its typical, within its cap) among
    those sending to these targets, its first entry to one of them, and that length."""
    found = [(answer_tokens(t, scale_of(t.name)), i, t, next(r for r in t.traffic if r.target in targets))
             for i, t in enumerate(plan.tenants) if any(r.target in targets for r in t.traffic)]
    if not found:
        return None
    tokens, _, tenant, entry = max(found, key=lambda f: (f[0], -f[1]))  # the first such tenant on a tie
    return tenant, entry, tokens


def longest_stream_body(plan: Plan, tenant: TenantPlan, entry: TrafficPlan, rng: random.Random,
                        run_seed: str = "") -> dict:
    """A streamed request of the tenant's asking as long an answer as the engine's context allows (room for
    the prompt twice over), within the tenant's cap: the stream a mid-stream fault cuts. In one clean clone a
    starved machine landed the kill 3.9 s after it began, as a stream of 1,152 tokens ended."""
    body = request_body(tenant, entry, rng, stream=True, run_seed=run_seed)
    longest = plan.engine(entry.engine).kv.max_context - 2 * tenant.typical_prompt_tokens
    body["max_tokens"] = max(1, min(longest, tenant.max_output_tokens or longest))
    return body


def request_body(tenant: TenantPlan, entry: TrafficPlan, rng: random.Random, stream: bool | None = None,
                 prompt: str | None = None, output_scale: float = 1.0, run_seed: str = "") -> dict:
    """A chat completion for this tenant and traffic entry. `stream` overrides the
    profile's choice; `prompt` replaces the generated one (cache probes); the output
    is `output_scale` times the tenant's typical length, within its cap; `run_seed`
    draws the RAG document (the rest of a prompt comes from `rng`)."""
    length = tenant.typical_prompt_tokens
    if tenant.max_prompt_tokens:
        length = min(length, tenant.max_prompt_tokens - 32)  # room for the chat template
    output = answer_tokens(tenant, output_scale)
    if prompt is None:
        if entry.profile == "rag":
            prompt = rag_document(tenant.name, length, run_seed) + "\nQuestion: " + words(rng, length - int(
                length * RAG_DOCUMENT_SHARE))
        else:
            prompt = words(rng, length)
    streamed = entry.profile != "batch" if stream is None else stream
    body = {"model": entry.target, "messages": [{"role": "user", "content": prompt}], "max_tokens": output,
            "temperature": 0, "ignore_eos": True, "stream": streamed}
    if streamed:
        body["stream_options"] = {"include_usage": True}
    return body
