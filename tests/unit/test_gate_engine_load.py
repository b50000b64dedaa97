"""The gate's engine sampler: vLLM's gauges read from a /metrics page, an engine that does not answer left out,
and each stage's busy share beside the tokens each tier was served."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tenantry.gate.engine_load import EngineSample, busy_by_stage, gauge, sample_engines
from tenantry.gate.report import tier_tokens
from tenantry.gate.run import price_of_isolation_table
from tenantry.gate.scenario_model import with_stage_seconds
from tenantry.gate.scenarios import scenario
from tenantry.stacks import plan_stack

ROOT = Path(__file__).resolve().parents[2]

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="0",model_name="micro"} 1.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_running_total{engine="0",model_name="tiny"} 99.0
"""


def test_a_gauge_is_read_for_its_engine_only():
    assert gauge(PAGE, "vllm:num_requests_running", "tiny") == 3.0
    assert gauge(PAGE, "vllm:num_requests_running", "micro") == 1.0
    assert gauge(PAGE, "vllm:num_requests_waiting", "micro") == 0.0


class _Stop(Exception):
    pass


def test_the_sampler_sums_replicas_and_skips_an_engine_that_does_not_answer():
    pages = {"http://a/metrics": PAGE, "http://b/metrics": PAGE}
    samples: list[EngineSample] = []
    sleeps = []

    def fetch(url: str) -> str:
        if url not in pages:
            raise ConnectionError(url)
        return pages[url]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise _Stop

    with pytest.raises(_Stop):
        sample_engines({"tiny": ["http://a/metrics", "http://b/metrics"], "micro": ["http://gone/metrics"]},
                       lambda: 1.5, fetch, sleep, samples)
    unanswered = EngineSample("micro", 1.5, 0.0, 0.0, answered=False)
    assert samples == [EngineSample("tiny", 1.5, 6.0, 4.0), unanswered] * 2  # two rounds; micro never answered


def test_busy_share_by_stage_and_the_tokens_each_tier_was_served():
    plan = plan_stack(ROOT / "stacks" / "local.yaml")
    noisy = with_stage_seconds(scenario("noisy-neighbour", plan, short=True), [20, 60])
    samples = [EngineSample("tiny", t, 1.0 if t < 10 else 0.0, 0.0) for t in range(20)]
    samples += [EngineSample("tiny", 20 + t, 4.0, 2.0, answered=t % 4 != 0) for t in range(60)]
    busy = busy_by_stage(samples, noisy)
    assert busy["alone"]["tiny"] == {"busy": 0.5, "running": 0.5, "waiting": 0.0, "answered": 1.0, "samples": 20}
    # Unanswered samples count in `answered` only, never as idle.
    assert busy["flood"]["tiny"]["busy"] == 1.0 and busy["flood"]["tiny"]["running"] == 4.0
    assert busy["flood"]["tiny"]["answered"] == 0.75
    stage = {"acme": {"tier": "guaranteed", "output_tokens_per_s": 3.0, "ttft_p95": 0.4},
             "globex": {"tier": "best-effort", "output_tokens_per_s": 1.0, "ttft_p95": None},
             "initech": {"tier": "spot", "output_tokens_per_s": 2.5, "ttft_p95": 3.0}}
    assert tier_tokens(stage) == {"guaranteed": 3.0, "best-effort": 1.0, "spot": 2.5}
    console = Console(width=200, record=True)
    console.print(price_of_isolation_table({"stages": {"alone": stage, "flood": stage}, "engines": busy}))
    text = console.export_text()
    assert "50% / 0.5 (100%)" in text and "100% / 4.0 (75%)" in text and "400" in text
