"""An engine's weights and adapters in claims filled once: one claim for the
checkpoint of its model revision and one for its set of adapters, each filled
by a Job whose name carries a digest of what it fetches (a new revision, a new
Job and a new claim) and mounted read-only by every replica. Only these Jobs
reach the network; only those fetching from the Hub get the Hub token
(docs/decisions.md: Weights live in a cache claim filled once)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from tenantry.deploy.common import COMPONENT_LABEL, DNS_EGRESS, ENGINE_LABEL, labels, mebibytes, pinned_image
from tenantry.deploy.common import TIMEOUT_ANNOTATION, pod_security, resources, restricted_container
from tenantry.deploy.identity import BucketAccess
from tenantry.deploy.sources import Source, hub_items, parse_source, rclone_script
from tenantry.plan.model import EnginePlan, Plan, PlatformPlan

MODELS_DIR = "/models"
WEIGHTS_DIR = f"{MODELS_DIR}/weights"
ADAPTERS_DIR = "/adapters"
CACHE_COMPONENT = "model-cache"
"""The component label of populate Jobs' pods: the network policy that lets them out selects it."""
HF_TOKEN_SECRET = "tenantry-hf-token"
HF_TOKEN_KEY = "token"
HF_TOKEN_CONFIG = "hfToken"
"""Pulumi config key (tenantry:hfToken, a secret) the Hub token comes from."""
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
REPLACE_UNREADY_ANNOTATION = "pulumi.com/replaceUnready"
"""On a fetch Job: the next `pulumi up` replaces it when it has not completed (pulumi-kubernetes' Diff reads the live
Job's status; provider.go, replaceUnready). Without it a Job past its activeDeadlineSeconds stays Failed and every
later `pulumi up` only waits on it again. The new Job resumes: snapshot_download skips the files already in the
claim (their metadata under <destination>/.cache/huggingface), rclone copies only what differs."""
FETCH_USER = 10001
HUB_FETCH = Path(__file__).resolve().parent / "hub_fetch.py"
DIGEST_CHARS = 10
MAX_NAME = 63
"""A Job's name becomes a label value of its pods."""


@dataclass(frozen=True, kw_only=True)
class CacheContent:
    """What one claim holds: (source, destination) pairs under `mount_path`."""

    engine: str
    role: Literal["weights", "adapters"]
    mount_path: str
    items: tuple[tuple[Source, str], ...]
    size_bytes: int

    @property
    def name(self) -> str:
        """Claim and Job name: the engine, the role and a digest of what is fetched."""
        what = json.dumps([[s.scheme, s.location, s.revision, d] for s, d in self.items])
        digest = hashlib.sha256(f"{self.role}\n{what}".encode()).hexdigest()[:DIGEST_CHARS]
        prefix = f"{self.engine}-{self.role}"[: MAX_NAME - DIGEST_CHARS - 1].rstrip("-")
        return f"{prefix}-{digest}"

    @property
    def from_hub(self) -> tuple[tuple[Source, str], ...]:
        return tuple((s, d) for s, d in self.items if s.scheme == "hf")

    @property
    def synced(self) -> tuple[tuple[Source, str], ...]:
        return tuple((s, d) for s, d in self.items if s.scheme != "hf")

    @property
    def reads_buckets(self) -> bool:
        return any(s.in_bucket for s, _ in self.items)

    @property
    def source_claims(self) -> list[str]:
        """The claims synced sources are read from, each mounted read-only."""
        return sorted({s.claim for s, _ in self.synced if s.claim})

    @property
    def files(self) -> dict[str, str]:
        files: dict[str, str] = {}
        if self.synced:
            files["fetch.sh"] = rclone_script(self.synced)
        if self.from_hub:
            files["hub_fetch.py"] = HUB_FETCH.read_text(encoding="utf-8")
            files["hub.json"] = hub_items(self.from_hub, whole=self.role == "adapters")
        return files


def engine_caches(engine: EnginePlan) -> tuple[CacheContent, ...]:
    """The weights claim, and the adapters claim when the engine serves adapters: apart, so that a
    tenant's new adapter does not fetch the checkpoint again."""
    # The revision pins the Hub commit, and names a bucket's or a claim's content: a new one is a new claim.
    weights = dataclasses.replace(parse_source(engine.source), revision=engine.revision)
    caches = [CacheContent(engine=engine.name, role="weights", mount_path=MODELS_DIR, items=((weights, WEIGHTS_DIR),),
                           size_bytes=engine.pod.model_cache_bytes)]
    if engine.lora.adapters:
        caches.append(CacheContent(
            engine=engine.name, role="adapters", mount_path=ADAPTERS_DIR,
            items=tuple((parse_source(a.source), f"{ADAPTERS_DIR}/{a.name}") for a in engine.lora.adapters),
            size_bytes=engine.pod.adapter_store_bytes,
        ))
    return tuple(caches)


def gated_engines(plan: Plan) -> list[str]:
    """Engines whose weights come from a gated Hub repository: they need the Hub token."""
    return [e.name for e in plan.engines if e.gated]


def fetches_from_hub(plan: Plan) -> bool:
    return any(s.scheme == "hf" for e in plan.engines for c in engine_caches(e) for s, _ in c.items)


def missing_hub_token_message(engines: list[str], stack: str) -> str:
    """(docs/decisions.md: The Hub token is a Pulumi secret only Hub Jobs mount)"""
    return (f"engine{'s' if len(engines) > 1 else ''} {', '.join(engines)} fetch{'' if len(engines) > 1 else 'es'} "
            f"weights from a gated Hugging Face repository and no Hub token is configured: run\n"
            f"  pulumi config set --secret tenantry:{HF_TOKEN_CONFIG} <token> --stack {stack}\n"
            "with a token of an account that has been granted access on the model's page")


def hub_token_secret(name: str, namespace: str, token: pulumi.Input[str], opts: pulumi.ResourceOptions
                     ) -> k8s.core.v1.Secret:
    return k8s.core.v1.Secret(
        name,
        metadata={"name": HF_TOKEN_SECRET, "namespace": namespace, "labels": labels(CACHE_COMPONENT)},
        string_data={HF_TOKEN_KEY: pulumi.Output.secret(token)},
        opts=opts,
    )


@dataclass(frozen=True, kw_only=True)
class CacheArgs:
    namespace: str
    fetch_image: str
    """rclone, for buckets and claims."""
    hub_image: str
    """An image with huggingface_hub (the engine's vLLM image), for the Hub."""
    access_mode: str
    storage_class: str | None
    deadline_seconds: int
    hub_token: k8s.core.v1.Secret | None
    bucket_access: BucketAccess | None
    bucket_account: pulumi.Resource | None
    node_selector: dict[str, str]
    """The engine's pool: a claim provisioned where its Job runs is in the zone of the GPUs that mount it."""
    tolerations: list[dict[str, str]]


def populate(resource_name: str, content: CacheContent, args: CacheArgs, parent: pulumi.Resource) -> k8s.batch.v1.Job:
    """The claim, the files its Job runs, and the Job; `pulumi up` waits for the Job to complete."""
    meta = {"name": content.name, "namespace": args.namespace,
            "labels": labels(CACHE_COMPONENT, **{ENGINE_LABEL: content.engine})}
    child = pulumi.ResourceOptions(parent=parent)
    claim = k8s.core.v1.PersistentVolumeClaim(
        f"{resource_name}-claim", metadata=meta,
        spec={"accessModes": [args.access_mode], "storageClassName": args.storage_class,
              "resources": {"requests": {"storage": mebibytes(content.size_bytes)}}},
        opts=child,
    )
    files = k8s.core.v1.ConfigMap(f"{resource_name}-files", metadata=meta, data=content.files, opts=child)
    hub_token = args.hub_token if content.from_hub else None
    account = args.bucket_account if content.reads_buckets else None
    return k8s.batch.v1.Job(
        f"{resource_name}-populate",
        metadata={**meta, "annotations": {TIMEOUT_ANNOTATION: str(args.deadline_seconds),
                                          REPLACE_UNREADY_ANNOTATION: "true"}},
        spec={
            "backoffLimit": 4,
            "activeDeadlineSeconds": args.deadline_seconds,
            "template": {"metadata": {"labels": meta["labels"]}, "spec": _pod_spec(content, args, hub_token)},
        },
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[claim, files, *(r for r in (hub_token, account) if r)]),
    )


def _pod_spec(content: CacheContent, args: CacheArgs, hub_token: k8s.core.v1.Secret | None) -> dict[str, Any]:
    access = args.bucket_access if content.reads_buckets else None
    steps = _steps(content, args, access, hub_token is not None)
    return {
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,
        **({"serviceAccountName": access.service_account} if access else {}),
        "nodeSelector": args.node_selector,
        "tolerations": args.tolerations,
        "securityContext": pod_security(FETCH_USER),
        **({"initContainers": steps[:-1]} if len(steps) > 1 else {}),
        "containers": steps[-1:],
        "volumes": [
            {"name": "cache", "persistentVolumeClaim": {"claimName": content.name}},
            {"name": "files", "configMap": {"name": content.name}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
            *({"name": f"source-{c}", "persistentVolumeClaim": {"claimName": c, "readOnly": True}}
              for c in content.source_claims),
            *([{"name": "hf-token", "secret": {"secretName": HF_TOKEN_SECRET}}] if hub_token is not None else []),
            *(access.volumes if access else ()),
        ],
    }


def _steps(
    content: CacheContent, args: CacheArgs, access: BucketAccess | None, hub_token: bool
) -> list[dict[str, Any]]:
    """rclone for buckets and claims, then huggingface_hub for the Hub: one container each, in order."""
    mounts = [{"name": "cache", "mountPath": content.mount_path},
              {"name": "files", "mountPath": "/fetch", "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}]
    common = {"resources": resources(1.0, FETCH_MEMORY_BYTES), "securityContext": restricted_container(user=FETCH_USER)}
    steps = []
    if content.synced:
        steps.append({
            "name": "sync", **pinned_image(args.fetch_image), "command": ["sh", "/fetch/fetch.sh"],
            "volumeMounts": [*mounts, *({"name": f"source-{c}", "mountPath": f"/sources/{c}", "readOnly": True}
                                        for c in content.source_claims),
                             *(access.volume_mounts if access else ())],
            "env": [{"name": "HOME", "value": "/tmp"}, *(access.env if access else ())],
            **common,
        })
    if content.from_hub:
        steps.append({
            "name": "hub", **pinned_image(args.hub_image),
            "command": ["python3", "/fetch/hub_fetch.py", "/fetch/hub.json"],
            "volumeMounts": [*mounts, *([{"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}]
                                        if hub_token else [])],
            "env": [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf"},
                    {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
                    *({"name": k, "value": v} for k, v in XET_DOWNLOAD_BUFFERS.items()),
                    # A file, not an environment variable: huggingface_hub reads it when present.
                    *([{"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/{HF_TOKEN_KEY}"}] if hub_token else [])],
            **common,
        })
    return steps


FETCH_MEMORY_BYTES = 2**31
"""Each fetch container's memory (request and limit)."""
XET_BUFFER_LIMIT_BYTES = 768 * 2**20
XET_DOWNLOAD_BUFFERS = {"HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_SIZE": "256mb",
                        "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_PERFILE_SIZE": "64mb",
                        "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_LIMIT": f"{XET_BUFFER_LIMIT_BYTES // 2**20}mb",
                        "HF_XET_CHUNK_CACHE_SIZE_BYTES": "0"}
"""hf_xet's download buffers, bounded to fit the fetch container's memory. Its defaults are 2 GB always, 512 MB more
per file downloading at once, up to 8 GB (xet-core's reconstruction config: download_buffer_size,
download_buffer_perfile_size, download_buffer_limit; read in its v1.6.0 source, the newest here, for the hf-xet 1.8.0
beside vLLM 0.32.0), and huggingface_hub's snapshot_download fetches up to 8 files at once: about 6 GB, where the
container has 2 GiB. Bounded: at most 768 MB of buffers, leaving the interpreter and the client over a GiB. The chunk
cache (10 GB on disk by default, under HF_HOME in /tmp) would only hold a second copy of a one-time download."""

GKE_METADATA_EGRESS = {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}], "ports": [{"protocol": "TCP", "port": 80}]}
"""Where GKE's metadata server answers Workload Identity's token requests."""


def egress_policies(name: str, namespace: str, platform: PlatformPlan, opts: pulumi.ResourceOptions) -> None:
    """Engines reach nothing but DNS: their weights are on their claims. The Jobs that fill the claims
    reach HTTPS (the Hub, S3, GCS) and, under GKE's Workload Identity, the metadata server
    (docs/decisions.md: Engines reach only DNS, cache Jobs HTTPS)."""
    identity = platform.cloud_identity
    cache_egress = [DNS_EGRESS, {"ports": [{"protocol": "TCP", "port": 443}]},
                    *([GKE_METADATA_EGRESS] if identity and identity.provider == "gcp" else [])]
    for policy, component, egress in (("tenantry-engines-egress", "engine", [DNS_EGRESS]),
                                      ("tenantry-model-cache-egress", CACHE_COMPONENT, cache_egress)):
        k8s.networking.v1.NetworkPolicy(
            f"{name}-{policy}",
            metadata={"name": policy, "namespace": namespace, "labels": labels("platform")},
            spec={"podSelector": {"matchLabels": {COMPONENT_LABEL: component}}, "policyTypes": ["Egress"],
                  "egress": egress},
            opts=opts,
        )
