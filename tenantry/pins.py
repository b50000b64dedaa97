"""Every third-party version tenantry deploys, in one place.

Container images are pinned here; Helm charts in charts/<name>/chart.yaml
(repository, chart, version, namespace) beside their base values, read
through `chart()`. Python packages are pinned in pyproject.toml. Tests fail
on any image without an explicit version and on any rendered image or chart
that is not listed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CHARTS_DIR = Path(__file__).resolve().parent.parent / "charts"

IMAGES: dict[str, str] = {
    # vLLM's OpenAI server, CUDA build; tag v0.31.0.
    "vllm": "vllm/vllm-openai:v0.31.0",
    # vLLM's CPU build (the local stack's CPU pool, when rendered for a cluster).
    "vllm-cpu": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.29.0",
    # The LiteLLM proxy at the version the local stack installs from PyPI (1.108.7).
    "litellm": "ghcr.io/berriai/litellm:v1.108.7",
    "redis": "redis:7.4.11-alpine",
    # PostgreSQL for CloudNativePG (its image catalog for operator 1.30).
    "postgres": "ghcr.io/cloudnative-pg/postgresql:16.10-system-trixie",
    # Syncs weights and adapters from s3://, gs:// and https:// into volumes.
    "rclone": "rclone/rclone:1.75.1",
}


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str
    chart: str
    version: str
    namespace: str
    values: dict[str, Any]


@cache
def chart(name: str) -> Chart:
    folder = CHARTS_DIR / name
    pin = yaml.safe_load((folder / "chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((folder / "values.yaml").read_text(encoding="utf-8")) or {}
    return Chart(name, pin["repository"], pin["chart"], str(pin["version"]), pin["namespace"], values)
