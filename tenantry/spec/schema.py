"""The platform spec: what a platform team writes in stacks/<stack>.yaml.

Typed with pydantic v2 in strict mode: YAML scalars must already be the right
type (a quoted "5" is not a number, 1.30 is not the string "1.30"), unknown
keys are refused, and every field carries a description and a unit that the
spec reference in docs/platform.md is generated from (`make docs`).
The models live by concern (fields, cluster, engines, tenants, gateway,
platform) and are all re-exported here, the one place to import them from.
Checks that span fields or need the catalog live in references.py.
"""

from __future__ import annotations

from tenantry.spec.cluster import ClusterSpec, GpuOperatorSpec, NodePoolSpec
from tenantry.spec.engines import (
    AdapterSpec,
    ArchitectureSpec,
    AutoscalingSpec,
    EngineSpec,
    LoraSpec,
    PlacementSpec,
    ThroughputOverrideSpec,
)
from tenantry.spec.fields import (
    KUBERNETES_VERSION_PATTERN,
    NAME_PATTERN,
    OBJECT_STORE_PATTERN,
    SIX_FIELD_CRON_PATTERN,
    SOURCE_PATTERN,
    TIERS,
    UNPINNED_REVISIONS,
    WINDOW_PATTERN,
    BudgetMode,
    CacheIsolationMode,
    CacheSalt,
    IsolationLevel,
    ClusterEnvironment,
    GpuSoftwareSource,
    KvCacheDtype,
    LoraModule,
    MetricsApiSource,
    ModelName,
    Name,
    NodeName,
    Revision,
    SourceUri,
    SpecModel,
    Tier,
    TrafficProfile,
    WeightDtype,
    field,
)
from tenantry.spec.gateway import AdmissionSpec, FallbackSpec, GatewaySpec
from tenantry.spec.platform import CloudIdentitySpec, ModelCacheSpec, PlatformSpec, PostgresSpec
from tenantry.spec.tenants import (
    BudgetSpec,
    CacheIsolationSpec,
    NamespaceQuotaSpec,
    SloSpec,
    TenantSpec,
    TierPolicySpec,
    TiersSpec,
    TrafficShareSpec,
    TypicalRequestSpec,
)
__all__ = [
    "AdapterSpec",
    "AdmissionSpec",
    "ArchitectureSpec",
    "BudgetSpec",
    "BudgetMode",
    "CacheIsolationMode",
    "IsolationLevel",
    "CacheIsolationSpec",
    "CacheSalt",
    "CloudIdentitySpec",
    "ClusterEnvironment",
    "ClusterSpec",
    "AutoscalingSpec",
    "EngineSpec",
    "FallbackSpec",
    "GatewaySpec",
    "GpuOperatorSpec",
    "GpuSoftwareSource",
    "KUBERNETES_VERSION_PATTERN",
    "KvCacheDtype",
    "LoraModule",
    "LoraSpec",
    "MetricsApiSource",
    "ModelCacheSpec",
    "ModelName",
    "NAME_PATTERN",
    "Name",
    "NamespaceQuotaSpec",
    "NodeName",
    "NodePoolSpec",
    "OBJECT_STORE_PATTERN",
    "PlacementSpec",
    "PlatformSpec",
    "PostgresSpec",
    "Revision",
    "SIX_FIELD_CRON_PATTERN",
    "SOURCE_PATTERN",
    "SloSpec",
    "SourceUri",
    "Spec",
    "SpecModel",
    "TIERS",
    "TenantSpec",
    "ThroughputOverrideSpec",
    "Tier",
    "TierPolicySpec",
    "TiersSpec",
    "TrafficProfile",
    "TrafficShareSpec",
    "TypicalRequestSpec",
    "UNPINNED_REVISIONS",
    "WINDOW_PATTERN",
    "WeightDtype",
    "field",
]


class Spec(SpecModel):
    """stacks/<stack>.yaml"""

    description: str = field("", description="What this stack is for.", max_length=2000)
    cluster: ClusterSpec = field(description="The cluster and its node pools.")
    engines: list[EngineSpec] = field(description="Model deployments.", min_length=1)
    tenants: list[TenantSpec] = field(description="Tenants and their contracts.", min_length=1)
    tiers: TiersSpec = field(default_factory=TiersSpec, description="Priority and request caps per tier.")
    gateway: GatewaySpec = field(default_factory=GatewaySpec, description="The LiteLLM gateway.")
    platform: PlatformSpec = field(default_factory=PlatformSpec, description="Shared services on Kubernetes.")
