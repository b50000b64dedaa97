"""One measured request, and the files a gate run leaves in its directory."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenantry.showback import ModelPrice

REQUESTS_JSONL = "requests.jsonl"
WARM_UP_JSONL = "warm-up.jsonl"
"""The requests the gate sends before the run: not measured, but charged by the gateway like any other."""
REQUESTS_CSV = "requests.csv"
RUN_JSON = "run.json"
VERDICT_JSON = "verdict.json"
REPORT_HTML = "report.html"

RETRY_AFTER_HONOURED_SECONDS = 60.0
"""The longest Retry-After a gate client waits, as the official OpenAI SDK honours it."""


def error_message(response) -> str:
    """What a refused or failed response (a requests.Response) says: LiteLLM's error message, or its text."""
    try:
        error = response.json().get("error", {})
        return str(error.get("message", error) if isinstance(error, dict) else error)[:500]
    except ValueError:
        return response.text[:500]


def retry_after_seconds(header: str) -> float:
    """A Retry-After in seconds that a client honours (0 < s <= a minute, as the OpenAI SDK); 0 otherwise."""
    try:
        seconds = float(header)
    except ValueError:
        return 0.0
    return seconds if 0 < seconds <= RETRY_AFTER_HONOURED_SECONDS else 0.0


@dataclass
class Record:
    """What the gate saw of one request. Times are seconds from the start of the run."""

    tenant: str
    tier: str
    profile: str
    """chat, rag, batch or adapter: the Locust user class that sent it."""
    target: str
    """The model or adapter asked for."""
    stage: str
    sent: float
    streamed: bool
    status: int
    """HTTP status; 0 when the request never got one (connection refused or reset, timeout)."""
    e2e: float
    """Seconds from sending to the last byte."""
    ttft: float | None = None
    """Seconds to the first generated token: the first streamed chunk with text, or for a
    request not streamed the whole response (its first token reaches the client with its last)."""
    gaps: list[float] = field(default_factory=list)
    """Inter-token latencies: the gaps between streamed chunks with text."""
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    """Prompt tokens the engine found in its prefix cache (vLLM's usage.prompt_tokens_details)."""
    served_by: str = ""
    """The model name in the response: the fallback's when the gateway fell back."""
    cost_usd: float | None = None
    """The response's usage at the Plan's per-token prices of the model that served it (what LiteLLM
    should have charged); None without usage or for a model the Plan does not serve."""
    max_tokens: int = 0
    """The answer's length asked for: the gate sends `ignore_eos`, so a whole answer has exactly this
    many tokens (0: not known)."""
    finish_reason: str = ""
    """Why the engine ended the answer ("stop", "length"), as the response or the stream's last chunk
    said; empty when it never said."""
    stream_end: str = ""
    """How a stream ended: "[DONE]", "error event" (the gateway's clean failure), or "cut" (neither:
    the connection closed or broke). Empty for requests not streamed."""
    error: str = ""
    shed: str = ""
    """On a 429 for capacity, why admission shed the request (the gateway's X-Tenantry-Shed);
    empty on a 429 for the tenant's own limits."""
    retry_after: float = 0.0
    """On a 429, the seconds the gateway's Retry-After asked the client to wait (0 without one)."""
    rerouted: str = ""
    """On an answer the tenant's overload fallback served, the gateway's X-Tenantry-Rerouted,
    `<model asked> -> <model served> (<reason>)`. LiteLLM puts the model asked for on the answer
    itself, so served_by (and the price) is read from here."""
    probe: str = ""
    """The gate's own requests: the cache-isolation probes ('<pair id>:first' or '<pair id>:second'), and
    'mid-stream', the stream a mid-stream fault sends so that it has one to cut."""
    gateway: int = 0
    """Which of the run's gateways it was sent to (its index)."""
    response_id: str = ""
    """The answer's `id` (a stream's chunks all carry it): LiteLLM's spend record of the answer has it as request_id."""

    @property
    def first_token_at(self) -> float | None:
        return None if self.ttft is None else self.sent + self.ttft

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error

    def read_usage(self, message: dict, prices: Mapping[str, ModelPrice]) -> None:
        """The model that answered, why it ended and its usage, from a response or a stream's chunk,
        and the usage's cost at the Plan's prices (`prices`: tenantry.showback.model_prices)."""
        rerouted_to = self.rerouted.partition(" -> ")[2].partition(" (")[0]
        self.served_by = rerouted_to or message.get("model") or self.served_by
        self.response_id = self.response_id or str(message.get("id") or "")
        for choice in message.get("choices") or ():
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        usage = message.get("usage") or {}
        if usage:
            self.output_tokens = usage.get("completion_tokens") or 0
            self.prompt_tokens = usage.get("prompt_tokens") or 0
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                self.cached_tokens = details["cached_tokens"]
            price = prices.get(self.served_by)
            self.cost_usd = price.cost(self.prompt_tokens, self.output_tokens) if price else None


def token_gaps(first: float | None, last: float | None, visible: list[float], tokens: int) -> list[float]:
    """The gaps between tokens. LiteLLM forwards only chunks with text, so when a
    stream showed fewer chunks than it had tokens (tokens that decode to nothing,
    as the local random-weight models emit), each visible gap is spread evenly
    over the tokens it carried."""
    if first is None or last is None or tokens < 2:
        return []
    times = [first, *[t for t in visible if t > first]]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    if len(gaps) >= tokens - 1:
        return gaps
    return [(last - first) / (tokens - 1)] * (tokens - 1)


def write_jsonl(path: Path, records: list[Record]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")


def write_records(directory: Path, records: list[Record]) -> None:
    write_jsonl(directory / REQUESTS_JSONL, records)
    columns = [f.name for f in fields(Record) if f.name != "gaps"]
    with (directory / REQUESTS_CSV).open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([*columns, "itl_max"])
        for record in sorted(records, key=lambda r: r.sent):
            writer.writerow([getattr(record, c) for c in columns] + [max(record.gaps, default="")])


def read_records(directory: Path, name: str = REQUESTS_JSONL) -> list[Record]:
    path = directory / name
    if not path.exists():
        return []
    return [Record(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
