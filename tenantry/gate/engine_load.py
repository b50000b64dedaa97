"""How busy each engine was while the gate ran, from vLLM's own gauges sampled about once a second: the price of
isolation, beside the tokens each tier was served. Only where the target knows the engines' /metrics (the local
stack's engines; a remote gateway's engines are behind it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tenantry.gate.scenarios import Scenario

SAMPLE_EVERY_SECONDS = 1.0
ENGINES_JSONL = "engines.jsonl"


@dataclass(frozen=True)
class EngineSample:
    engine: str
    at: float
    """Seconds from the start of the run."""
    running: float
    """vllm:num_requests_running over the engine's replicas."""
    waiting: float
    """vllm:num_requests_waiting over the engine's replicas."""


def gauge(text: str, name: str, engine: str) -> float:
    """A gauge of one engine in a /metrics page, summed over its label sets."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'model_name="{engine}"' in line)


def sample_engines(urls: dict[str, list[str]], elapsed: Callable[[], float], fetch: Callable[[str], str],
                   sleep: Callable[[float], None], into: list[EngineSample]) -> None:
    """Forever (a greenlet the run kills): each engine's gauges over its replicas. An engine any of whose
    replicas did not answer gets no sample that second (a stopped engine is not an idle one)."""
    while True:
        for engine, replicas in urls.items():
            try:
                pages = [fetch(url) for url in replicas]
            except Exception:  # noqa: BLE001 - an engine down or slow to answer: no sample, never the run's end
                continue
            running = sum(gauge(page, "vllm:num_requests_running", engine) for page in pages)
            into.append(EngineSample(engine, elapsed(), running,
                                     sum(gauge(page, "vllm:num_requests_waiting", engine) for page in pages)))
        sleep(SAMPLE_EVERY_SECONDS)


def busy_by_stage(samples: list[EngineSample], scenario: Scenario) -> dict[str, dict[str, dict[str, float]]]:
    """Per stage and engine: `busy`, the share of samples with a request running; `running` and `waiting`, their
    means; `samples`, how many there were."""
    result: dict[str, dict[str, dict[str, float]]] = {}
    start = 0.0
    for stage in scenario.stages:
        inside = [s for s in samples if start <= s.at < start + stage.seconds]
        result[stage.name] = {
            engine: {"busy": sum(s.running > 0 for s in mine) / len(mine), "running": sum(s.running for s in mine)
                     / len(mine), "waiting": sum(s.waiting for s in mine) / len(mine), "samples": len(mine)}
            for engine in sorted({s.engine for s in inside}) if (mine := [s for s in inside if s.engine == engine])
        }
        start += stage.seconds
    return result


def write_samples(folder: Path, samples: list[EngineSample]) -> None:
    with (folder / ENGINES_JSONL).open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(asdict(s)) + "\n" for s in samples)
