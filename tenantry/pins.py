"""Every third-party version tenantry deploys, in one place.

Container images are pinned here; Helm charts in charts/<name>/chart.yaml
(repository, chart, version, namespace) beside their base values, read
through `chart()`. Python packages are pinned in pyproject.toml. Tests fail
on any image without an explicit version and on any rendered image or chart
that is not listed here.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CHARTS_DIR = Path(__file__).resolve().parent.parent / "charts"
APPLIED_CRDS_DIR = Path(__file__).resolve().parent.parent / "crds"
"""CRDs no pinned chart installs, which tenantry applies itself from these files (crds/<project>/<name>.yaml,
each with its source): Gateway API's and the inference extension's, for kv-aware routing."""

IMAGES: dict[str, str] = {
    # vLLM's OpenAI server, CUDA and CPU builds, at the vLLM the local stack runs (vllm-cpu in
    # requirements-vllm.lock): the flags, metrics and request fields tenantry relies on are proven on
    # that one version. Digests still to be added (docs/decisions.md: One vLLM version, pinned by tag and digest).
    "vllm": "vllm/vllm-openai:v0.32.0",
    "vllm-cpu": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0",
    # The LiteLLM proxy at the version the local stack installs from PyPI (1.108.7).
    "litellm": "ghcr.io/berriai/litellm:v1.108.7",
    "redis": "redis:7.4.11-alpine",
    # Redis's memory, evictions and refused connections for the alerts: oliver006/redis_exporter v1.88.0 (its
    # exporter/exporter.go names them redis_memory_used_bytes, redis_memory_max_bytes, redis_evicted_keys_total).
    "redis-exporter": "docker.io/oliver006/redis_exporter:v1.88.0",
    # PostgreSQL 16 for CloudNativePG: the exact tag and digest of its standard trixie image catalog;
    # the major stays 16 (docs/decisions.md: PostgreSQL 16, standard image, current minor).
    "postgres": "ghcr.io/cloudnative-pg/postgresql:16.15-202608170814-standard-trixie"
                "@sha256:3df9103d7f89c8abc2870463d4d446944c81b5f1f4b707c590895dc003ecbb65",
    # Syncs weights and adapters from s3://, gs:// and https:// into volumes.
    "rclone": "rclone/rclone:1.75.1",
    # llm-d's endpoint picker for kv-aware engines: the image llm-d-router v0.10.0's release publishes
    # (hack/push-chart.sh sets it in the published chart; the chart's source says `main`).
    "llm-d-epp": "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0",
    # kube-prometheus-stack's CRD upgrade Job (crds.upgradeJob, charts/crds/templates/upgrade/job.yaml at chart
    # 88.5.3): busybox unpacks the CRDs (the chart's default tag is latest), kubectl applies them server-side (its
    # default tag is the cluster's version). kubectl 1.35 is within one minor of every Kubernetes the pins support
    # (supported_kubernetes(), 1.34-1.36): the skew kubectl supports.
    "busybox": "docker.io/busybox:1.37.0",
    "kubectl": "registry.k8s.io/kubectl:v1.35.0",
}

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def chart_image_values(image: str) -> dict[str, str]:
    """A pinned image as Helm charts' image values spell it: registry, repository, tag (and sha, the digest's hex,
    when the pin carries one)."""
    name, _, digest = image.partition("@")
    registry, _, rest = name.partition("/")
    repository, _, tag = rest.rpartition(":")
    return {"registry": registry, "repository": repository, "tag": tag,
            "sha": digest.removeprefix("sha256:") if digest else ""}


def image_pin_problem(image: str) -> str | None:
    """Why an image reference is no fixed pin, or None: a pin names a tag other than latest,
    optionally followed by the manifest digest it must resolve to (`repo:tag@sha256:<64 hex>`)."""
    name, at, digest = image.partition("@")
    tag = name.rsplit("/", 1)[-1].partition(":")[2]
    if not tag or tag == "latest":
        return "has no fixed tag"
    if at and not DIGEST.fullmatch(digest):
        return f"has a malformed digest {digest!r} (sha256: and 64 lower-case hex digits)"
    return None


KUBERNETES_SUPPORT: dict[str, tuple[str, str]] = {
    # Kubernetes minor versions, oldest and newest, each pinned chart's own support table lists
    # (docs/decisions.md: Kubernetes versions every pin supports).
    "gpu-operator": ("1.32", "1.36"),
    "kube-prometheus-stack": ("1.25", "1.37"),  # kubeVersion >=1.25; 1.37 is the newest tenantry can validate
    "cloudnative-pg": ("1.34", "1.36"),
    "plugin-barman-cloud": ("1.29", "1.37"),  # kubeVersion >=1.29.0-0
    "cert-manager": ("1.33", "1.36"),
    "metrics-server": ("1.31", "1.37"),  # 0.8.x: 1.31+
    # kubeVersion >=1.23 (KEDA's docs list 1.33-1.35 as tested for 2.20); 1.37 is the newest tenantry can validate.
    "keda": ("1.23", "1.37"),
    # LWS needs 1.26+ (site/content/en/docs/installation, v0.10.0); 1.37 is the newest tenantry can validate.
    "lws": ("1.26", "1.37"),
    # Istio 1.30 needs 1.32+ (istioctl/pkg/install/k8sversion MinK8SVersion at 1.30.3); its newest supported minor is
    # not in its source: 1.36 assumes Istio's usual five minors (istio.io's supported-releases table, unread here).
    "istio-base": ("1.32", "1.36"),
    "istiod": ("1.32", "1.36"),
}


def supported_kubernetes() -> tuple[str, str]:
    """The oldest and newest Kubernetes minor every pinned chart supports."""
    def minor(version: str) -> int:
        return int(version.split(".")[1])

    return (max(KUBERNETES_SUPPORT.values(), key=lambda r: minor(r[0]))[0],
            min(KUBERNETES_SUPPORT.values(), key=lambda r: minor(r[1]))[1])


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str
    chart: str
    version: str
    namespace: str
    values: dict[str, Any]

    @property
    def oci(self) -> bool:
        """Published as an OCI artifact: Helm names it by its reference, with no repository index to read."""
        return self.repository.startswith("oci://")

    def crds(self) -> list[dict[str, Any]]:
        """The CustomResourceDefinitions kept from the pinned release (charts/<name>/crds), as it ships them: every
        one of a chart whose CRDs tenantry applies itself (lws), the kinds tenantry renders of the others."""
        return [copy.deepcopy(crd_file(path)) for path in sorted((CHARTS_DIR / self.name / "crds").glob("*.yaml"))]

    def release_source(self) -> dict[str, Any]:
        """A Helm Release's chart and repository arguments for this pin."""
        if self.oci:
            return {"chart": f"{self.repository}/{self.chart}"}
        return {"chart": self.chart, "repository_opts": {"repo": self.repository}}

    def is_release_of(self, props: dict[str, Any]) -> bool:
        """Whether a rendered Release (its props) installs exactly this pin."""
        source = self.release_source()
        repo = (props.get("repositoryOpts") or {}).get("repo")
        return (props.get("chart"), props.get("version"), repo) == (
            source["chart"], self.version, source.get("repository_opts", {}).get("repo"))


def pinned_chart_of(reference: str) -> Chart:
    """The pin a Release's chart argument names (a chart name, or an OCI reference ending in one): the folder of
    that name, or else the one pin of that chart under another name (Istio's `base` is charts/istio-base)."""
    name = reference.rsplit("/", 1)[-1] if reference.startswith("oci://") else reference
    if (CHARTS_DIR / name / "chart.yaml").exists():
        return chart(name)
    pins = [chart(folder.name) for folder in sorted(CHARTS_DIR.iterdir()) if (folder / "chart.yaml").exists()]
    found = [pin for pin in pins if pin.release_source()["chart"] == reference]
    if len(found) != 1:
        raise FileNotFoundError(f"charts/ pins {len(found)} charts named {reference!r}")
    return found[0]


@cache
def crd_file(path: Path) -> dict[str, Any]:
    """A pinned CRD file, parsed once a process (the largest are thousands of lines; every render reads them)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def chart(name: str) -> Chart:
    folder = CHARTS_DIR / name
    pin = yaml.safe_load((folder / "chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((folder / "values.yaml").read_text(encoding="utf-8")) or {}
    return Chart(name, pin["repository"], pin["chart"], str(pin["version"]), pin["namespace"], values)
