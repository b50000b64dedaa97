"""The install `make test` and `make local` start with: the five virtual environments from their lock files, one
at a time (make -j1) against two at a time (make -j2, what `make venv` does), side by side in one run.

    python3 benchmarks/install.py [--rounds 1] [--cache-warm]

Each round clones the repository's committed tree twice into a temporary folder and installs every environment in
each clone (pip's own cache warm for both, as on a machine that installed once: the first round's first install
warms it and is not counted), alternating which order goes first. The figures to compare are the medians and their
ratio. It takes about ten minutes a round on two cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install(jobs: int, where: Path) -> float:
    """Seconds to install every environment into a fresh clone at `where`, `jobs` at a time."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where)], check=True)
    started = time.monotonic()
    done = subprocess.run(["make", "--no-print-directory", f"-j{jobs}", "environments"], cwd=where,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"make -j{jobs} failed in {where}:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cache-warm", action="store_true", help="skip the warm-up: pip's cache holds every pin")
    args = parser.parse_args()
    seconds: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="tenantry-install-") as work:
        if not args.cache_warm:
            install(2, Path(work) / "warm-up")  # fills pip's cache, as on any machine that installed once
        for round_ in range(args.rounds):
            for jobs in ((1, 2) if round_ % 2 == 0 else (2, 1)):
                seconds[jobs].append(install(jobs, Path(work) / f"r{round_}-j{jobs}"))
                print(f"round {round_ + 1}: {jobs} at a time: {seconds[jobs][-1]:.0f} s", flush=True)
    one, two = statistics.median(seconds[1]), statistics.median(seconds[2])
    print(f"median: one at a time {one:.0f} s, two at a time {two:.0f} s: {two / one:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
