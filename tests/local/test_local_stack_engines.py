"""The local stack's engines failing for real: killed mid-stream, started with no time to serve, and their very
first request after a start. Each starts the engine again before it ends (the stack is shared with the other
modules of tests/local/)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import httpx
import pytest

from tenantry.local.health import LocalStackError
from tenantry.local.supervisor import program_pid, restart_engine_if_stopped, wait_for_engine
from tests.local.conftest import answers_again_after_idle, chat, longest_token, stream_text
from tests.local.held_streams import on_time, scheduler_processes


def test_an_engine_serves_a_one_token_prompt_as_its_very_first_request(stack):
    # On CPUs with AMX, vLLM's CPU attention needs the AMX state granted first
    # (tenantry/local/engine_site): a first prompt this short once killed the worker.
    with stack.engine_stopped("micro"):
        pass  # started again and healthy when the block ends; nothing has reached it since
    answer = httpx.post(f"{stack.engine_url('micro')}/v1/completions",
                        json={"model": "micro", "prompt": "hello", "max_tokens": 2}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["prompt_tokens"] == 1
    assert httpx.get(f"{stack.engine_url('micro')}/health", timeout=10).status_code == 200


NO_HANG_SECONDS = 60
"""The client's read timeout: a stream whose engine died that sent nothing for this long hangs."""


STEP_SECONDS = 0.02
"""How long the engine's generating processes run at a time: a few of tiny's tokens on two CPU cores, where the
stream asks for 1,000."""
RELAY_SECONDS = 2.0
"""How long, after a step in which the engine generated, the gateway has to relay it to the client, the engine
frozen."""


def _step_then_kill(stack, engine: str, group: int, generators: list[int], baseline: float,
                    client_has_content: threading.Event, abandon: threading.Event, done: dict) -> None:
    """With the engine's scheduler and worker (held_streams.scheduler_processes) frozen before the request was
    sent, let them run STEP_SECONDS at a time, each step followed, once the engine reports tokens generated, by
    up to RELAY_SECONDS frozen for the client to receive a chunk; once it holds one, SIGKILL the whole group.
    Between two looks the engine can only have made a step's tokens, so the stream cannot reach its end however
    far the gateway lags (CI on b2ef3ee: 1,000 tokens done before the client saw 5 chunks; a fresh clone of
    84d5f84: an engine polled every 10 ms reported all 1,000 at its first look)."""
    deadline = time.monotonic() + NO_HANG_SECONDS
    try:
        while time.monotonic() < deadline and not abandon.is_set() and not client_has_content.is_set():
            with on_time():  # the step ends when it should, however busy the machine
                for pid in generators:
                    os.kill(pid, signal.SIGCONT)
                time.sleep(STEP_SECONDS)  # the step itself, not a wait for something
                for pid in generators:
                    os.kill(pid, signal.SIGSTOP)
            if stack.engine_metric(engine, "vllm:generation_tokens_total") > baseline:  # else step again at once
                client_has_content.wait(timeout=RELAY_SECONDS)
        done["frozen_after_tokens"] = stack.engine_metric(engine, "vllm:generation_tokens_total") - baseline
    finally:
        os.killpg(group, signal.SIGKILL)  # never left frozen, whatever happened above
        done["killed"] = True


def test_an_engine_killed_mid_stream_ends_its_stream_with_an_error_event_and_new_requests_fall_back(stack):
    # SIGKILL to the engine's whole process group, as the kill-engine fault does, but while the engine is
    # frozen mid-stream (_step_then_kill).
    group = program_pid(stack.layout, "engine-tiny")
    assert group, "engine tiny is not running"
    max_tokens = 1000
    body = {"model": "tiny", "messages": [{"role": "user", "content": "write a long story"}],
            "max_tokens": max_tokens, "stream": True,
            "logit_bias": {str(longest_token(stack, "tiny")): 100}}  # no early end of sequence
    lines, done, client_has_content, abandon = [], {}, threading.Event(), threading.Event()
    generators = scheduler_processes(stack.layout, "tiny")
    killer = threading.Thread(target=_step_then_kill, args=(
        stack, "tiny", group, generators, stack.engine_metric("tiny", "vllm:generation_tokens_total"),
        client_has_content, abandon, done))
    try:
        for pid in generators:
            os.kill(pid, signal.SIGSTOP)  # nothing generated until the killer's first step
        killer.start()
        with stack.client("acme", timeout=NO_HANG_SECONDS) as client, client.stream("POST", "/v1/chat/completions",
                                                                        json=body) as streamed:
            assert streamed.status_code == 200
            for line in streamed.iter_lines():
                lines.append(line)
                if line.startswith("data: {") and re.search(r'"content": ?"[^"]', line):
                    client_has_content.set()
        killer.join()
        chunks = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
        content = [c for c in chunks if c.get("choices")]
        told = (f"{len(content)} content chunks, models {sorted({c.get('model') for c in chunks if c.get('model')})}, "
                f"frozen after {done.get('frozen_after_tokens')} tokens generated")
        print(told, *lines[-3:], sep="\n")
        assert "frozen_after_tokens" in done, f"the engine never reported the stream's tokens: {told}"
        assert content and len(content) < max_tokens, f"the stream was not cut mid-way: {told}"
        assert "data: [DONE]" not in lines, f"a stream cut by its engine's death ended as a success: {told}"
        errors = [json.loads(x[6:])["error"] for x in lines if x.startswith("data: {") and '"error"' in x]
        assert errors and errors[-1].get("message"), lines[-3:]
        # In tenantry's words (tenant_policy_errors): no engine address, no LiteLLM exception text.
        engine = f"127.0.0.1:{stack.up.ports.engines['tiny']}"
        assert errors[-1].get("type") == "engine_error" and engine not in errors[-1]["message"], errors[-1]
        with stack.client("acme") as client:  # the fallback serves the dead engine's requests, streamed and not
            answer = chat(client, "tiny")
            assert answer.status_code == 200 and answer.json()["model"] in ("micro", "hosted_vllm/micro"), answer.text
            with client.stream("POST", "/v1/chat/completions",
                               json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 8, "stream": True}) as streamed:
                assert streamed.status_code == 200
                chunks = stream_text(streamed)
            assert chunks and not [c for c in chunks if "error" in c], chunks[:2]
    finally:
        abandon.set()
        client_has_content.set()
        killer.join()
        restart_engine_if_stopped(stack.layout, stack.up.plan, "tiny")  # supervisord starts it again; wait for it


def test_an_engine_that_does_not_serve_in_time_has_its_stacks_logged_and_is_restarted_once(stack):
    """No time at all to start: both waits "fail", so the error carries both records."""
    log = stack.layout.logs / "engine-micro.log"
    pid, logged = program_pid(stack.layout, "engine-micro"), log.stat().st_size
    steps: list[str] = []
    try:
        with pytest.raises(LocalStackError) as refused:
            wait_for_engine(stack.layout, "micro", stack.up.ports.engines["micro"], steps.append, seconds=0)
    finally:
        restart_engine_if_stopped(stack.layout, stack.up.plan, "micro")
    print(refused.value)
    assert len(steps) == 1 and "restarting it once" in steps[0] and f"{pid} vllm" in steps[0], steps
    assert "VLLM::Worker" in steps[0] and "GiB available" in steps[0], steps
    assert "twice (restarted once)" in str(refused.value) and "last lines of" in str(refused.value)
    assert program_pid(stack.layout, "engine-micro") not in (None, pid), "the engine was not restarted"
    with log.open(errors="replace") as text:
        text.seek(logged)
        assert "most recent call first" in text.read(), "the engine's processes did not log their stacks"


def test_an_engine_keeps_an_idle_connection_open_past_vllms_default(stack):
    """The engines run with VLLM_HTTP_TIMEOUT_KEEP_ALIVE from configs/vllm.py, so that LiteLLM, whose pool keeps
    an idle connection 15 s, always closes first. vLLM's default closes an idle connection after 5 s: then the
    second request on the same socket would be reset or find it closed."""
    # idle beyond vLLM's default keep-alive of 5 s
    assert answers_again_after_idle(stack.engine_url("micro"), "/health", 6), "the engine closed an idle connection"
