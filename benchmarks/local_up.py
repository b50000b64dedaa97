"""The local stack: how long `local up` takes to a healthy stack, what each
process holds in memory, and what the gateway costs per request compared
with calling vLLM directly, side by side in one run.

    .venv/bin/python benchmarks/local_up.py [--requests 200] [--concurrency 4]

Starts its own stack (directory .local/bench-stack, ports from 19300; the
models must be built already, as after `make local`), measures, and stops it.
Requests alternate between the two paths in rounds, so the shared machine's
noise lands on both; the figures to compare are the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tenantry.local import stack as local  # noqa: E402
from tenantry.local.health import tree_resident_mib  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, Layout  # noqa: E402


def timed_requests(url: str, headers: dict[str, str], model: str, count: int, concurrency: int) -> tuple[list[float], float]:
    body = {"model": model, "prompt": "tenant gateway engine", "max_tokens": 1, "temperature": 0}
    latencies: list[float] = []

    def one(client: httpx.Client) -> None:
        start = time.perf_counter()
        answer = client.post("/v1/completions", json=body)
        answer.raise_for_status()
        latencies.append(time.perf_counter() - start)

    with httpx.Client(base_url=url, headers=headers, timeout=60) as client, ThreadPoolExecutor(concurrency) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: one(client), range(count)))
        elapsed = time.perf_counter() - started
    return latencies, count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    layout = Layout.from_environment(DEFAULT_DIR / "bench-stack", 19300)
    local.down(layout, purge=True, progress=lambda _: None)
    # stacks/local.yaml with limits out of the way: this measures the gateway, not a tenant's quota.
    spec = yaml.safe_load((ROOT / "stacks" / "local.yaml").read_text())
    for tenant in spec["tenants"]:
        tenant.update(rpm=1_000_000, tpm=40_000, max_concurrency=4)
        tenant["budget"]["usd"] = 1000
    layout.root.mkdir(parents=True, exist_ok=True)
    spec_path = layout.root / "bench.yaml"
    spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    started = time.monotonic()
    result = local.up(str(spec_path), layout, progress=lambda line: print("  " + line))
    print(f"local up to healthy: {time.monotonic() - started:.1f} s\n")
    try:
        print(f"{'process':<16} {'RSS MiB':>8}")
        for row in local.status(layout):
            print(f"{row.name:<16} {tree_resident_mib(row.pid or 0):>8.0f}")
        engine = f"http://127.0.0.1:{result.ports.engines['tiny']}"
        key = {"Authorization": f"Bearer {result.keys['acme']}"}
        per_round = max(1, args.requests // args.rounds)
        direct, gateway, direct_rps, gateway_rps = [], [], [], []
        timed_requests(engine, {}, "tiny", 10, 2)  # warm both paths
        timed_requests(result.gateway_url, key, "tiny", 10, 2)
        for _ in range(args.rounds):
            latencies, rps = timed_requests(engine, {}, "tiny", per_round, args.concurrency)
            direct += latencies
            direct_rps.append(rps)
            latencies, rps = timed_requests(result.gateway_url, key, "tiny", per_round, args.concurrency)
            gateway += latencies
            gateway_rps.append(rps)

        def p(values: list[float], q: float) -> float:
            return statistics.quantiles(values, n=100)[q - 1] * 1000

        print(f"\n{per_round * args.rounds} requests per path, concurrency {args.concurrency}, 1 output token, "
              f"{args.rounds} alternating rounds")
        print(f"{'path':<26} {'req/s (median)':>15} {'p50 ms':>8} {'p95 ms':>8}")
        for name, lat, rps in (("vLLM directly", direct, direct_rps), ("through the gateway", gateway, gateway_rps)):
            print(f"{name:<26} {statistics.median(rps):>15.1f} {p(lat, 50):>8.1f} {p(lat, 95):>8.1f}")
        print(f"gateway added p50 latency: {p(gateway, 50) - p(direct, 50):.1f} ms "
              f"(x{p(gateway, 50) / p(direct, 50):.2f}); throughput ratio x{statistics.median(gateway_rps) / statistics.median(direct_rps):.2f}")
    finally:
        local.down(layout, purge=True, progress=lambda _: None)


if __name__ == "__main__":
    main()
