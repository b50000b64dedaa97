"""How planning scales: synthetic stacks of 10 to 10,000 tenants with twice as
many adapters, from YAML text to a Plan and to `tenantry plan`'s tables.

    .venv/bin/python benchmarks/plan_scale.py [--repeat 5] [--max-tenants 10000]

Prints, per size, the median wall time of loading (YAML + validation +
cross-checks), of planning, of both, and of printing `tenantry plan`'s tables
(to memory), over --repeat runs, then peak Python memory of one plan measured
apart (tracemalloc slows the code it watches). A stack that does not fit is
an error, not a figure: a refused plan stops early and would flatter the time.
The target is in docs/decisions.md (Planning scale target). A shared, noisy
machine moves the times: compare the ratios.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import tracemalloc
from dataclasses import dataclass

import yaml
from rich.console import Console

from tenantry.cli.plan_report import print_plan
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
        "cluster": {"environment": "eks", "node_pools": [{"name": "h200", "gpu": "H200-141GB", "gpus_per_node": 8,
                                    "nodes": -(-gpus // 8), "gpu_hour_price_usd": 3.79}]},
        "engines": engines,
        "tenants": tenant_specs,
        # The adapters come from S3: the spec requires the identity that reads them. Replicas span nodes, so
        # the weights cache is a ReadWriteMany claim.
        "platform": {"cloud_identity": {"provider": "aws",
                                        "aws_role_arn": "arn:aws:iam::111122223333:role/tenantry-buckets"},
                     "model_cache": {"access_mode": "ReadWriteMany", "storage_class": "efs"},
                     "runbook_base_url": "https://runbooks.example.com/tenantry"},
    }
    return yaml.safe_dump(spec, sort_keys=False)


SIZES = ((10, 20), (100, 200), (1000, 2000), (3000, 6000), (10000, 20000))


@dataclass(frozen=True)
class Figures:
    load: float
    plan: float
    total: float
    report: float
    peak: int


def measure(text: str, repeat: int) -> Figures:
    loads, plans, totals, reports = [], [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        spec = load_spec_text(text)
        loaded = time.perf_counter()
        result = plan(spec, "bench")
        done = time.perf_counter()
        if not result.fits:
            raise SystemExit(f"the synthetic stack does not fit: {result.refusals[0]}")
        print_plan(result, Console(file=io.StringIO(), width=160))
        reports.append(time.perf_counter() - done)
        loads.append(loaded - start)
        plans.append(done - loaded)
        totals.append(done - start)
    tracemalloc.start()
    plan(load_spec_text(text), "bench")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Figures(statistics.median(loads), statistics.median(plans), statistics.median(totals),
                   statistics.median(reports), peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-tenants", type=int, default=SIZES[-1][0], help="the largest size to run")
    args = parser.parse_args()
    print(f"{'tenants':>8} {'adapters':>9} {'YAML kB':>8} {'load s':>8} {'plan s':>8} {'total s':>8} "
          f"{'ms/tenant':>10} {'tables s':>9} {'peak MiB':>9}  plan growth")
    previous = None
    for tenants, adapters in (size for size in SIZES if size[0] <= args.max_tenants):
        text = synthetic_stack(tenants, adapters)
        f = measure(text, args.repeat)
        growth = f"x{f.plan / previous[1]:.1f} for x{tenants / previous[0]:.0f}" if previous else ""
        print(f"{tenants:>8} {adapters:>9} {len(text) / 1000:>8.0f} {f.load:>8.3f} {f.plan:>8.3f} {f.total:>8.3f} "
              f"{1000 * f.total / tenants:>10.2f} {f.report:>9.3f} {f.peak / 2**20:>9.1f}  {growth}")
        previous = (tenants, f.plan)


if __name__ == "__main__":
    main()
