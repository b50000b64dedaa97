"""How long the Pulumi program takes under the mock runtime, and how much it
registers: every shipped stack and synthetic stacks of 200 and 1,000 tenants.

    .venv/bin/python benchmarks/render.py [--repeat 3] [--tenants 200 1000]

Prints, per stack, the resource count (Kubernetes objects, Helm releases),
the median wall time of a render over --repeat runs, and peak Python memory
of one more run under tracemalloc, against the targets that the largest
shipped stack renders in 30 s or less (docs/decisions.md: The largest shipped
stack renders in 30 s) and so do 1,000 tenants (issue 18).
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
    parser.add_argument("--tenants", type=int, nargs="*", default=[200, 1000], help="synthetic stacks' tenant counts")
    args = parser.parse_args()
    stacks = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
    with tempfile.TemporaryDirectory() as scratch:
        synthetic = []
        for tenants in args.tenants:
            synthetic.append(Path(scratch) / f"synthetic-{tenants}.yaml")
            synthetic[-1].write_text(synthetic_stack(tenants, 2 * tenants), encoding="utf-8")
        print(f"{'stack':<22} {'resources':>9} {'k8s objects':>11} {'releases':>8} {'median s':>9} {'peak MiB':>9} "
              f"{'≤ 30 s':>6}")
        for spec in [*stacks, *synthetic]:
            count, objects, releases, seconds, peak = measure(spec, args.repeat)
            print(f"{spec.stem:<22} {count:>9} {objects:>11} {releases:>8} {seconds:>9.2f} {peak / 2**20:>9.1f} "
                  f"{'yes' if seconds <= 30 else 'NO':>6}")


if __name__ == "__main__":
    main()
