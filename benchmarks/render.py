"""How long the Pulumi program takes under the mock runtime, and how much it
registers: every shipped stack and synthetic stacks of 200 and 1,000 tenants.

    .venv/bin/python benchmarks/render.py [--repeat 3] [--tenants 200 1000]
    .venv/bin/python benchmarks/render.py --against <commit> [--repeat 3] [--tenants 1000]

Prints, per stack, the resource count (Kubernetes objects, Helm releases),
the median wall time of a render over --repeat runs, and peak Python memory
of one more run under tracemalloc, against the targets that the largest
shipped stack renders in 30 s or less (docs/decisions.md: The largest shipped
stack renders in 30 s) and so do 1,000 tenants (issue 18).

With --against, only the synthetic stacks, each rendered by this tree and
by the given commit (checked out in a temporary git worktree) in turn, each
render in a fresh interpreter: the medians and their ratio, side by side
in one run, on a machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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


ONE_RENDER = """
import sys, time
from tenantry.manifests.offline import render
start = time.perf_counter()
rendering = render(sys.argv[1])
print(len(rendering.resources), time.perf_counter() - start)
"""


def render_in(tree: Path, spec: Path) -> tuple[int, float]:
    """One render by the program in `tree`, in a fresh interpreter: (resources, seconds)."""
    done = subprocess.run([sys.executable, "-c", ONE_RENDER, str(spec)], cwd=tree, env={
        **os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, check=True)
    count, seconds = done.stdout.split()[-2:]
    return int(count), float(seconds)


def side_by_side(commit: str, specs: list[Path], repeat: int, scratch: str) -> None:
    other = Path(scratch) / "against"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(other), commit], check=True)
    try:
        print(f"{'stack':<22} {'resources':>9} {'median s':>9} {commit[:10]:>10} {'median s':>9} {'ratio':>6}")
        for spec in specs:
            ours, theirs = [], []
            for _ in range(repeat):  # alternating, so a drift in the machine's speed hits both
                ours.append(render_in(ROOT, spec))
                theirs.append(render_in(other, spec))
            mine, before = statistics.median(s for _, s in ours), statistics.median(s for _, s in theirs)
            print(f"{spec.stem:<22} {ours[0][0]:>9} {mine:>9.2f} {theirs[0][0]:>10} {before:>9.2f} "
                  f"{mine / before:>6.2f}")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tenants", type=int, nargs="*", default=[200, 1000], help="synthetic stacks' tenant counts")
    parser.add_argument("--against", metavar="COMMIT", help="render the synthetic stacks with this commit too, "
                        "alternating, and print the ratio")
    args = parser.parse_args()
    stacks = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
    with tempfile.TemporaryDirectory() as scratch:
        synthetic = []
        for tenants in args.tenants:
            synthetic.append(Path(scratch) / f"synthetic-{tenants}.yaml")
            synthetic[-1].write_text(synthetic_stack(tenants, 2 * tenants), encoding="utf-8")
        if args.against:
            side_by_side(args.against, synthetic, args.repeat, scratch)
            return
        print(f"{'stack':<22} {'resources':>9} {'k8s objects':>11} {'releases':>8} {'median s':>9} {'peak MiB':>9} "
              f"{'≤ 30 s':>6}")
        for spec in [*stacks, *synthetic]:
            count, objects, releases, seconds, peak = measure(spec, args.repeat)
            print(f"{spec.stem:<22} {count:>9} {objects:>11} {releases:>8} {seconds:>9.2f} {peak / 2**20:>9.1f} "
                  f"{'yes' if seconds <= 30 else 'NO':>6}")


if __name__ == "__main__":
    main()
