"""One measured request, and the files a gate run leaves in its directory."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

REQUESTS_JSONL = "requests.jsonl"
REQUESTS_CSV = "requests.csv"
RUN_JSON = "run.json"
VERDICT_JSON = "verdict.json"
REPORT_HTML = "report.html"


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
    error: str = ""
    shed: str = ""
    """On a 429 for capacity, why admission shed the request (the gateway's X-Tenantry-Shed);
    empty on a 429 for the tenant's own limits."""
    probe: str = ""
    """For the cache-isolation probes: '<pair id>:first' or '<pair id>:second'."""

    @property
    def first_token_at(self) -> float | None:
        return None if self.ttft is None else self.sent + self.ttft

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error


def write_records(directory: Path, records: list[Record]) -> None:
    with (directory / REQUESTS_JSONL).open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")
    columns = [f.name for f in fields(Record) if f.name != "gaps"]
    with (directory / REQUESTS_CSV).open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([*columns, "itl_max"])
        for record in sorted(records, key=lambda r: r.sent):
            writer.writerow([getattr(record, c) for c in columns] + [max(record.gaps, default="")])


def read_records(directory: Path) -> list[Record]:
    path = directory / REQUESTS_JSONL
    if not path.exists():
        return []
    return [Record(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
