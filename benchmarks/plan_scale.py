"""How planning scales: synthetic stacks of 10, 100 and 1,000 tenants with
20, 200 and 2,000 adapters, from YAML text to a Plan.

    .venv/bin/python benchmarks/plan_scale.py [--repeat 5]

Prints, per size, the median wall time of loading (YAML + validation +
cross-checks), of planning, and of both, over --repeat runs, then peak Python
memory of one run measured apart (tracemalloc slows the code it watches).
The target is in docs/decisions.md (Planning scale target). A shared,
noisy machine moves the times: compare the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import yaml

from tenantry.plan import plan
from tenantry.spec import load_spec_text

REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"
TIERS = ("guaranteed", "best-effort", "best-effort", "spot", "spot")


def synthetic_stack(tenants: int, adapters: int) -> str:
    """Engines of Llama 3.1 8B on H200s, each serving up to 250 adapters;
    tenants spread over engines and tiers, two adapters each."""
    engines_needed = max(1, adapters // 250)
    replicas = max(1, tenants // (10 * engines_needed))
    engines = []
    for e in range(engines_needed):
        engines.append({
            "name": f"engine-{e}",
            "model": "llama-3.1-8b",
            "max_context": 8192,
            "placement": {"pool": "h200", "tensor_parallel": 1},
            "replicas": replicas,
            "lora": {"cpu_cache_gib": 64},
            "adapters": [],
        })
    tenant_specs = []
    for t in range(tenants):
        engine = engines[t % engines_needed]
        name = f"tenant-{t:04d}"
        own = [f"{name}-a{k}" for k in range(adapters // tenants)]
        for adapter in own:
            engine["adapters"].append({
                "name": adapter, "base_model": "llama-3.1-8b", "base_revision": REVISION,
                "rank": (8, 16, 16, 32)[t % 4], "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "source": f"s3://adapters/{name}/{adapter}", "tenant": name,
            })
        tenant_specs.append({
            "name": name,
            "tier": TIERS[t % len(TIERS)],
            "models": [engine["name"]],
            "adapters": own,
            "tpm": 20000, "rpm": 200, "max_concurrency": 4,
            "budget": {"usd": 100, "window": "1mo"},
            "slo": {"ttft_p95_ms": 1000, "itl_p95_ms": 80, "max_error_rate": 0.01},
            "typical": {"prompt_tokens": 1000, "output_tokens": 200},
        })
    gpus = engines_needed * replicas
    spec = {
        "cluster": {"node_pools": [{"name": "h200", "gpu": "H200-141GB", "gpus_per_node": 8,
                                    "nodes": -(-gpus // 8), "gpu_hour_price_usd": 3.79}]},
        "engines": engines,
        "tenants": tenant_specs,
    }
    return yaml.safe_dump(spec, sort_keys=False)


def measure(text: str, repeat: int) -> tuple[float, float, float, int, bool]:
    loads, plans, totals = [], [], []
    fits = False
    for _ in range(repeat):
        start = time.perf_counter()
        spec = load_spec_text(text)
        loaded = time.perf_counter()
        result = plan(spec, "bench")
        done = time.perf_counter()
        loads.append(loaded - start)
        plans.append(done - loaded)
        totals.append(done - start)
        fits = result.fits
    tracemalloc.start()
    plan(load_spec_text(text), "bench")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(loads), statistics.median(plans), statistics.median(totals), peak, fits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'tenants':>8} {'adapters':>9} {'YAML kB':>8} {'load s':>8} {'plan s':>8} {'total s':>8} "
          f"{'ms/tenant':>10} {'peak MiB':>9} {'fits':>5}")
    previous = None
    for tenants, adapters in ((10, 20), (100, 200), (1000, 2000)):
        text = synthetic_stack(tenants, adapters)
        load, planning, total, peak, fits = measure(text, args.repeat)
        growth = f"  x{total / previous:.1f} for x10" if previous else ""
        print(f"{tenants:>8} {adapters:>9} {len(text) / 1000:>8.0f} {load:>8.3f} {planning:>8.3f} {total:>8.3f} "
              f"{1000 * total / tenants:>10.2f} {peak / 2**20:>9.1f} {str(fits):>5}{growth}")
        previous = total


if __name__ == "__main__":
    main()
