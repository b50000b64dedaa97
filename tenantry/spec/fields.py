"""What every spec model is built from: the Literal types the Plan keeps, name and URI patterns,
documented fields, and strict, frozen models that refuse unknown keys."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# Declared once: the Plan keeps these types in its own fields (tenantry.plan.model).
Tier = Literal["guaranteed", "best-effort", "spot"]
TIERS: tuple[Tier, ...] = ("guaranteed", "best-effort", "spot")
WeightDtype = Literal["bf16", "fp8", "int4-awq"]
KvCacheDtype = Literal["auto", "fp8"]
Routing = Literal["service", "kv-aware"]
LoraModule = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TrafficProfile = Literal["chat", "rag", "batch"]
CacheIsolationMode = Literal["own", "shared", "none"]
BudgetMode = Literal["chargeback", "showback"]
IsolationLevel = Literal["shared", "adapter", "mig", "dedicated-replica", "dedicated-node"]
CloudIdentityProvider = Literal["aws", "gcp", "static"]
BucketScheme = Literal["s3", "gs"]
BUCKET_SCHEMES: tuple[BucketScheme, ...] = get_args(BucketScheme)
ClusterEnvironment = Literal["bare-metal", "eks", "gke", "aks"]
GpuSoftwareSource = Literal["operator", "preinstalled"]
MetricsApiSource = Literal["install", "present"]
KubeletServingCerts = Literal["cluster-ca", "self-signed"]
ModelCacheAccessMode = Literal["ReadWriteOnce", "ReadWriteMany"]

# Names become Kubernetes object names (Services need RFC 1035 labels) and
# gateway model names, so one rule serves all of them.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, min_length=1, max_length=50)]
# Kubernetes node names are DNS subdomains.
NodeName = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253)
]
ModelName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=100)]
SOURCE_PATTERN = r"^(hf|s3|gs|pvc|local)://\S+$"
SourceUri = Annotated[str, Field(pattern=SOURCE_PATTERN, max_length=500)]
KUBERNETES_VERSION_PATTERN = r"^1\.(2[5-9]|3[0-7])$"
WINDOW_PATTERN = r"^[1-9][0-9]{0,4}(s|m|h|d|w|mo)$"
OBJECT_STORE_PATTERN = r"^(s3|gs)://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?$"
AWS_ROLE_ARN_PATTERN = r"^arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"
GCP_SERVICE_ACCOUNT_PATTERN = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$"
SIX_FIELD_CRON_PATTERN = r"^\S+ \S+ \S+ \S+ \S+ \S+$"

UNPINNED_REVISIONS = {"latest", "main", "master", "head", "stable"}


def _pinned(revision: str) -> str:
    if revision.lower() in UNPINNED_REVISIONS:
        raise ValueError(f"'{revision}' moves over time; pin a commit or a release tag")
    return revision


Revision = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9._-]+$", min_length=1, max_length=100), AfterValidator(_pinned)
]


def _valid_cache_salt(salt: str) -> str:
    # Refused here so that vLLM's 400 for such a salt never reaches production
    # (docs/decisions.md: Cache salts vLLM accepts).
    if not salt:
        raise ValueError("must not be empty")
    if len(salt) > 128:
        raise ValueError(f"must be at most 128 characters, got {len(salt)}")
    for bad, label in (("@", "'@'"), ("/", "'/'"), ("\\", "a backslash"), ("\0", "a NUL byte")):
        if bad in salt:
            raise ValueError(f"must not contain {label} (vLLM refuses such salts)")
    return salt


CacheSalt = Annotated[str, AfterValidator(_valid_cache_salt)]


def field(default: Any = ..., *, description: str, unit: str | None = None, **constraints: Any) -> Any:
    """A documented field; `unit` is shown in docs/platform.md's spec reference."""
    extra = {"unit": unit} if unit else None
    return Field(default, description=description, json_schema_extra=extra, **constraints)


class SpecModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, populate_by_name=False
    )
