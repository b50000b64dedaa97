"""What the gateway's front door costs a request's body, on the CPU, side by side in one run:

    .venv/bin/python benchmarks/front_door.py [--against <commit>] [--rounds 15]

For bodies of a few sizes (a one-line chat, a typical 200-token prompt, a full 2k context, and the largest
body the biggest shipped stack accepts), the median time of

- `json.loads` alone: what LiteLLM spends parsing the body anyway, the floor;
- this tree's check (tenant_policy_request.checked_body: parse with duplicate-key and constant checks,
  depth, the allow-list, each field's type, serialised again for LiteLLM);
- with --against, the same commit's front door check of the body (the previous front door's
  `request_problem`, its tenant_policy_front_door.py loaded from `git show`),

alternating in rounds on a machine whose speed drifts, with the ratios of the medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the plugin imports litellm: no download

from tenantry.gateway import tenant_policy  # noqa: E402,F401 - puts the plugin's folder on sys.path
from tenantry.stacks import plan_stack  # noqa: E402

import tenant_policy_request  # noqa: E402

WORDS = "tenant gateway engine model adapter budget quota priority cache salt token prompt".split()


def chat_body(tokens: int) -> bytes:
    text = " ".join(WORDS[i % len(WORDS)] for i in range(tokens))
    return json.dumps({"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
                                                     {"role": "user", "content": text}],
                       "max_tokens": 256, "temperature": 0.2, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()


def bodies() -> dict[str, bytes]:
    largest = max(plan_stack(p.stem).gateway.max_request_bytes for p in (ROOT / "stacks").glob("*.yaml")
                  if not p.name.startswith("Pulumi."))
    sized = {"one line": chat_body(4), "200 tokens": chat_body(200), "2k context": chat_body(2000)}
    tokens = 2000
    while len(chat_body(tokens * 2)) < largest:
        tokens *= 2
    sized[f"{len(chat_body(tokens)) // 1024} KiB"] = chat_body(tokens)
    return sized


def previous_check(commit: str) -> Callable[[bytes], object]:
    source = subprocess.run(["git", "show", f"{commit}:tenantry/gateway/tenant_policy_front_door.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "previous_front_door.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("previous_front_door", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return lambda body: module.request_problem("/v1/chat/completions", body)


def median_seconds(check: Callable[[bytes], object], body: bytes, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        check(body)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="a commit whose front door check runs beside this tree's")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    checks: dict[str, Callable[[bytes], object]] = {
        "json.loads": json.loads, "this tree": lambda body: tenant_policy_request.checked_body("chat", body)}
    if args.against:
        checks[args.against[:10]] = previous_check(args.against)
    for name, body in bodies().items():
        repeat = max(3, 200_000 // max(len(body), 1))
        rounds: dict[str, list[float]] = {check: [] for check in checks}
        for _ in range(args.rounds):
            for check, run in checks.items():  # alternating, so drift touches each alike
                rounds[check].append(median_seconds(run, body, repeat))
        medians = {check: statistics.median(times) for check, times in rounds.items()}
        shown = ", ".join(f"{check} {seconds * 1e6:,.0f} µs" for check, seconds in medians.items())
        ratios = ", ".join(f"this tree / {check} {medians['this tree'] / seconds:.2f}"
                           for check, seconds in medians.items() if check != "this tree")
        print(f"{name:>10} ({len(body):,} bytes): {shown}; {ratios}")


if __name__ == "__main__":
    main()
