"""How long the Pulumi program takes under the mock runtime, and how much it
registers: every shipped stack and a synthetic 200-tenant stack.

    .venv/bin/python benchmarks/render.py [--repeat 3]

Prints, per stack, the resource count (Kubernetes objects, Helm releases),
the median wall time of a render over --repeat runs, and peak Python memory
of one more run under tracemalloc, against the target that the largest
shipped stack renders in 30 s or less (docs/decisions.md: The largest shipped
stack renders in 30 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from plan_scale import synthetic_stack  # noqa: E402

from tenantry.manifests.offline import render  # noqa: E402


def measure(spec: Path, repeat: int) -> tuple[int, int, int, float, int]:
    times = []
    rendering = None
    for _ in range(repeat):
        start = time.perf_counter()
        rendering = render(spec)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    render(spec)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert rendering is not None
    return (len(rendering.resources), len(rendering.manifests()), len(rendering.releases()),
            statistics.median(times), peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    stacks = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
    with tempfile.TemporaryDirectory() as scratch:
        synthetic = Path(scratch) / "synthetic-200.yaml"
        synthetic.write_text(synthetic_stack(200, 400), encoding="utf-8")
        print(f"{'stack':<22} {'resources':>9} {'k8s objects':>11} {'releases':>8} {'median s':>9} {'peak MiB':>9}")
        for spec in [*stacks, synthetic]:
            count, objects, releases, seconds, peak = measure(spec, args.repeat)
            print(f"{spec.stem:<22} {count:>9} {objects:>11} {releases:>8} {seconds:>9.2f} {peak / 2**20:>9.1f}")


if __name__ == "__main__":
    main()
