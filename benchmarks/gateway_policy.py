"""What the tenant-policy plugin costs per request: the same LiteLLM, same
config, same database, Redis and engine, with and without the plugin, side by
side in one run.

    .venv/bin/python benchmarks/gateway_policy.py [--requests 400] [--rounds 8] [--control]

Starts its own stack (directory .local/bench-policy, ports from 19400; the
models must be built already, as after `make local`) and beside it two
LiteLLM processes started the same way, whose configs differ only in the
plugin's callback. Rounds alternate between the two (and swap which goes
first), so the shared machine's noise lands on both; compare medians and
their ratios. `--control` gives both the plugin: an A/A run that shows the
method's own noise.

Per request it reports latency (p50, p95), the gateway's CPU time (the
LiteLLM process and its children, from /proc) and, for the plugin, its own
time as it measures it (tenantry_gateway_policy_seconds). Two tenants take
the plugin's two paths: acme (guaranteed: within its reservation, one Redis
round trip) and initech (spot: also reads the engine's load, cached 1 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tenantry.local import side_gateways  # noqa: E402
from tenantry.local import stack as local  # noqa: E402
from tenantry.local.layout import DEFAULT_DIR, HOST, Layout  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live descendants."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / CLOCK_TICKS


def policy_seconds(url: str, master_key: str) -> tuple[float, float]:
    """(sum, count) of the plugin's own timing histogram."""
    text = httpx.get(f"{url}/metrics/", headers={"Authorization": f"Bearer {master_key}"}, timeout=10).text
    values = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for suffix in values:
            if line.startswith(f"tenantry_gateway_policy_seconds_{suffix}"):
                values[suffix] += float(line.rsplit(" ", 1)[1])
    return values["sum"], values["count"]


def batch(url: str, key: str, count: int, concurrency: int, stream: bool) -> tuple[list[float], int]:
    """`count` chat completions (1 token, or a stream of 16); their latencies
    to the last byte and how many failed."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "tenant gateway engine"}], "temperature": 0,
            "max_tokens": 16 if stream else 1, "stream": stream}
    latencies: list[float] = []
    failures = 0

    def one(client: httpx.Client) -> None:
        nonlocal failures
        start = time.perf_counter()
        try:
            with client.stream("POST", "/v1/chat/completions", json=body) as answer:
                answer.read()
        except httpx.TransportError as error:
            failures += 1
            print(f"    {url}: {type(error).__name__}: {error}")
            return
        if answer.status_code != 200:
            failures += 1
            print(f"    {url}: HTTP {answer.status_code}: {answer.text[:160]}")
            return
        latencies.append(time.perf_counter() - start)

    with (httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client,
          ThreadPoolExecutor(concurrency) as pool):
        list(pool.map(lambda _: one(client), range(count)))
    return latencies, failures


def label_of(tenant: str, tier: str, concurrency: int, stream: bool) -> str:
    return f"{tenant} ({tier}), concurrency {concurrency}, " + ("stream of 16" if stream else "1 token")


@dataclass(frozen=True)
class Case:
    tenant: str
    tier: str
    concurrency: int
    stream: bool


# Concurrency 3 stays under acme's limit of 4: this measures the cost of
# admission, not a tenant at its limit waiting for a slot (by design).
CASES = (Case("acme", "guaranteed", 1, False), Case("acme", "guaranteed", 3, False), Case("initech", "spot", 1, False),
         Case("acme", "guaranteed", 1, True), Case("acme", "guaranteed", 3, True))


@dataclass
class Cell:
    """One gateway's figures for one case, over every round."""
    latencies: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    """CPU ms per request, one figure per round."""
    failed: int = 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="per gateway, tenant and concurrency")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--streams-only", action="store_true", help="only the streamed cases")
    parser.add_argument("--control", action="store_true",
                        help="A/A run: the second gateway keeps the plugin too, so differences are the method's noise")
    return parser.parse_args()


def start_stack(layout: Layout) -> local.UpResult:
    """stacks/local.yaml with quotas out of the way: this measures the plugin, not a tenant's limits."""
    local.down(layout, purge=True, progress=lambda _: None)
    spec = yaml.safe_load((ROOT / "stacks" / "local.yaml").read_text())
    for tenant in spec["tenants"]:
        tenant.update(rpm=1_000_000, tpm=40_000)  # the most a guaranteed tenant may hold on engine tiny
        tenant["budget"]["usd"] = 1000
    layout.root.mkdir(parents=True, exist_ok=True)
    (layout.root / "bench.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return local.up(str(layout.root / "bench.yaml"), layout, progress=lambda line: print("  " + line))


def measure(case: Case, gateways: dict[str, tuple[str, int]], key: str, master_key: str,
            args: argparse.Namespace) -> tuple[dict[str, Cell], float | None]:
    """Rounds alternating between the gateways (and which goes first); their
    cells, and the plugin's own ms per request as it measures it."""
    for url, _ in gateways.values():
        batch(url, key, 20, case.concurrency, case.stream)  # warm: key cache, connections
    cells = {name: Cell() for name in gateways}
    plugin_seconds = plugin_count = 0.0
    per_round = max(1, args.requests // args.rounds)
    for round_number in range(args.rounds):
        order = list(gateways) if round_number % 2 == 0 else list(reversed(gateways))
        for name in order:
            url, pid = gateways[name]
            before_cpu = tree_cpu_seconds(pid)
            before_policy = policy_seconds(url, master_key) if name == "with plugin" else (0.0, 0.0)
            values, failures = batch(url, key, per_round, case.concurrency, case.stream)
            cells[name].cpu_ms.append((tree_cpu_seconds(pid) - before_cpu) / per_round * 1000)
            if name == "with plugin":
                after = policy_seconds(url, master_key)
                plugin_seconds += after[0] - before_policy[0]
                plugin_count += after[1] - before_policy[1]
            cells[name].latencies += values
            cells[name].failed += failures
    return cells, (plugin_seconds / plugin_count * 1000 if plugin_count else None)


def report_case(case: Case, cells: dict[str, Cell], plugin_ms: float | None) -> tuple[str, float, float]:
    """Its rows of the table; what the plugin added to p50 latency and CPU."""
    label = f"{case.tenant} ({case.tier}), {case.concurrency}, " + ("stream 16" if case.stream else "1 token")
    medians = {}
    for name, cell in cells.items():
        p50 = statistics.median(cell.latencies) * 1000
        p95 = statistics.quantiles(cell.latencies, n=20)[18] * 1000
        cpu_ms = statistics.median(cell.cpu_ms)
        plugin = f"{plugin_ms:.2f}" if name == "with plugin" and plugin_ms is not None else "—"
        medians[name] = (p50, cpu_ms)
        print(f"{label:<36} {name:<16} {p50:>8.1f} {p95:>8.1f} {cpu_ms:>11.1f} {plugin:>14} {cell.failed:>7}")
        label = ""
    (p50_without, cpu_without), (p50_with, cpu_with) = medians["without plugin"], medians["with plugin"]
    return (label_of(case.tenant, case.tier, case.concurrency, case.stream), p50_with / p50_without - 1,
            cpu_with / cpu_without - 1)


def main() -> None:
    args = parse_args()
    layout = Layout.from_environment(DEFAULT_DIR / "bench-policy", 19400)
    result = start_stack(layout)
    # Only the compared gateways take requests: the stack's own stays idle.
    ports = {"without plugin": layout.port_base + 90, "with plugin": layout.port_base + 91}
    process_names = {name: "gateway-" + name.replace(" ", "-") for name in ports}
    processes = {
        name: side_gateways.start_side_gateway(layout, result.ports, process_names[name], ports[name],
                                               plugin=name == "with plugin" or args.control)
        for name in ports
    }
    try:
        master_key = (layout.secrets / "master-key").read_text().strip()
        gateways = {}
        for name, process in processes.items():
            url = f"http://{HOST}:{ports[name]}"
            side_gateways.wait_side_gateway(layout, process_names[name], url, process)
            gateways[name] = (url, process.pid)
        cases = [case for case in CASES if case.stream or not args.streams_only]
        print(f"\n{args.requests} requests per cell, {args.rounds} alternating rounds, engine tiny; "
              "latency to the last byte\n")
        print(f"{'tenant (tier), concurrency':<36} {'gateway':<16} {'p50 ms':>8} {'p95 ms':>8} {'CPU ms/req':>11} "
              f"{'plugin ms/req':>14} {'failed':>7}")
        summary = [report_case(case, *measure(case, gateways, result.keys[case.tenant], master_key, args))
                   for case in cases]
        print("\nadded by the plugin (target: 10 % or less)")
        for label, latency, cpu_added in summary:
            print(f"  {label:<44} p50 latency {latency:+.1%}   CPU per request {cpu_added:+.1%}")
    finally:
        for process in processes.values():
            side_gateways.stop_side_gateway(process)
        local.down(layout, purge=True, progress=lambda _: None)


if __name__ == "__main__":
    main()
