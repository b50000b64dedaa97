"""How busy each engine was while the gate ran, from vLLM's own gauges sampled about once a second: the price of
isolation, beside the tokens each tier was served. Only where the target knows the engines' /metrics (the local
stack's engines; a remote gateway's engines are behind it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tenantry.gate.scenario_model import Scenario

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
    answered: bool = True
    """False when a replica's /metrics did not answer within the timeout: a saturated engine's API server
    answers late, so the answered samples lean towards idle moments, and their share says how far."""


def gauge(text: str, name: str, engine: str) -> float:
    """A gauge of one engine in a /metrics page, summed over its label sets."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'model_name="{engine}"' in line)


def sample_engines(urls: dict[str, list[str]], elapsed: Callable[[], float], fetch: Callable[[str], str],
                   sleep: Callable[[float], None], into: list[EngineSample]) -> None:
    """Forever (a greenlet the run kills): each engine's gauges over its replicas. An engine any of whose
    replicas did not answer gets an unanswered sample that second (neither idle nor busy)."""
    while True:
        for engine, replicas in urls.items():
            try:
                pages = [fetch(url) for url in replicas]
            except Exception:  # noqa: BLE001 - an engine down or slow to answer: counted, never the run's end
                into.append(EngineSample(engine, elapsed(), 0.0, 0.0, answered=False))
                continue
            running = sum(gauge(page, "vllm:num_requests_running", engine) for page in pages)
            into.append(EngineSample(engine, elapsed(), running,
                                     sum(gauge(page, "vllm:num_requests_waiting", engine) for page in pages)))
        sleep(SAMPLE_EVERY_SECONDS)


def busy_by_stage(samples: list[EngineSample], scenario: Scenario) -> dict[str, dict[str, dict[str, float]]]:
    """Per stage and engine, of the samples the engine answered: `busy`, the share with a request running;
    `running` and `waiting`, their means; and `answered`, the share of all its samples that were answered
    (`samples`: how many were taken)."""
    result: dict[str, dict[str, dict[str, float]]] = {}
    start = 0.0
    for stage in scenario.stages:
        inside = [s for s in samples if start <= s.at < start + stage.seconds]
        result[stage.name] = {}
        for engine in sorted({s.engine for s in inside}):
            mine = [s for s in inside if s.engine == engine]
            answered = [s for s in mine if s.answered] or [EngineSample(engine, 0.0, 0.0, 0.0)]
            result[stage.name][engine] = {
                "busy": sum(s.running > 0 for s in answered) / len(answered),
                "running": sum(s.running for s in answered) / len(answered),
                "waiting": sum(s.waiting for s in answered) / len(answered),
                "answered": sum(s.answered for s in mine) / len(mine), "samples": len(mine)}
        start += stage.seconds
    return result


def write_samples(folder: Path, samples: list[EngineSample]) -> None:
    with (folder / ENGINES_JSONL).open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(asdict(s)) + "\n" for s in samples)
