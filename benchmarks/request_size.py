"""What multi-megabyte requests cost the gateway and the other tenants: a
guaranteed tenant's small requests, alone and while another tenant sends
bodies far over the Plan's gateway.max_request_bytes as fast as it can
(refused with a 413 by the front door), alternating in rounds.

    .venv/bin/python benchmarks/request_size.py [--rounds 6] [--requests 40] [--mib 8] [--senders 4]

Starts its own stack of tests/local/stack.yaml (its acme may send 600 requests
a minute; directory .local/bench-size, ports from 19900; the models must be
built already, as after `make local`) and measures its first gateway replica. In the
flood, half the senders declare their size (Content-Length) and half send it
chunked, so both of the front door's paths are taken. Per mode: acme's
latency (p50, p95, over every round), the largest resident memory of the
gateway process (with its Prisma bridge) seen (sampled every 0.1 s), and in the flood the 413s'
answer time and the bytes offered. Compare the ratios: the shared machine's
noise lands on both modes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tenantry.local import stack as local  # noqa: E402
from tenantry.local.health import tree_resident_mib  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, HOST, Layout  # noqa: E402

CHUNK = b"x" * (1 << 20)


def body_of(mib: int) -> bytes:
    return b'{"model": "tiny", "messages": [{"role": "user", "content": "' + CHUNK * mib + b'"}]}'


def flood(url: str, key: str, mib: int, chunked: bool, stop: threading.Event, answers: list[tuple[int, float]]) -> None:
    body = body_of(mib)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        while not stop.is_set():
            started = time.perf_counter()
            content = (body[i:i + len(CHUNK)] for i in range(0, len(body), len(CHUNK))) if chunked else body
            try:
                status = client.post("/v1/chat/completions", content=content).status_code
            except httpx.TransportError:
                status = 0  # the gateway closed the connection after its 413, before the body was all sent
            answers.append((status, time.perf_counter() - started))


def small_requests(url: str, key: str, count: int) -> list[float]:
    latencies = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        for _ in range(count):
            started = time.perf_counter()
            answer = client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "small"}], "max_tokens": 1})
            if answer.status_code == 200:
                latencies.append(time.perf_counter() - started)
            else:
                print(f"    acme: HTTP {answer.status_code}: {answer.text[:120]}")
    return latencies


def one_round(url: str, keys: dict[str, str], gateway_pid: int, args: argparse.Namespace, flooded: bool):
    stop, answers, peak = threading.Event(), [], [tree_resident_mib(gateway_pid)]

    def sample() -> None:
        while not stop.is_set():
            peak.append(tree_resident_mib(gateway_pid))
            time.sleep(0.1)

    with ThreadPoolExecutor(args.senders + 1) as pool:
        pool.submit(sample)
        if flooded:
            for sender in range(args.senders):
                pool.submit(flood, url, keys["initech"], args.mib, sender % 2 == 1, stop, answers)
        latencies = small_requests(url, keys["acme"], args.requests)
        stop.set()
    return latencies, answers, max(peak)


def report(name: str, latencies: list[float], answers: list[tuple[int, float]], peaks: list[float], mib: int) -> None:
    p95 = statistics.quantiles(latencies, n=20)[-1] if len(latencies) >= 20 else max(latencies)
    line = (f"{name:<8} acme p50 {statistics.median(latencies) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  "
            f"gateway RSS peak {max(peaks):6.0f} MiB (median of rounds {statistics.median(peaks):6.0f})")
    if answers:
        codes = {code: sum(1 for c, _ in answers if c == code) for code in sorted({c for c, _ in answers})}
        line += (f"  big bodies: {len(answers)} ({len(answers) * mib} MiB offered), statuses {codes}, "
                 f"answered in {statistics.median(s for _, s in answers) * 1000:.0f} ms at the median")
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=40, help="acme's small requests per round")
    parser.add_argument("--mib", type=int, default=8, help="size of each big body")
    parser.add_argument("--senders", type=int, default=4)
    args = parser.parse_args()
    layout = Layout.from_environment(DEFAULT_DIR / "bench-size", 19900)
    local.down(layout, purge=True, progress=lambda _: None)
    try:
        up = local.up(str(ROOT / "tests" / "local" / "stack.yaml"), layout, progress=lambda line: print("  " + line))
        url = f"http://{HOST}:{up.ports.gateway}"
        pid = next(s.pid for s in local.status(layout) if s.name == "gateway-0")
        figures = {False: ([], [], []), True: ([], [], [])}
        for number in range(args.rounds):
            for flooded in (number % 2 == 1, number % 2 == 0):  # alternate which mode goes first
                latencies, answers, peak = one_round(url, up.keys, pid, args, flooded)
                figures[flooded][0].extend(latencies)
                figures[flooded][1].extend(answers)
                figures[flooded][2].append(peak)
        print(f"\nmax_request_bytes {up.plan.gateway.max_request_bytes} B; big bodies of {args.mib} MiB from "
              f"{args.senders} senders (half chunked)")
        report("alone", *figures[False], args.mib)
        report("flooded", *figures[True], args.mib)
        ratio = statistics.median(figures[True][0]) / statistics.median(figures[False][0])
        print(f"acme's median latency flooded / alone: {ratio:.2f}x")
    finally:
        local.down(layout, purge=True, progress=lambda _: None)


if __name__ == "__main__":
    main()
