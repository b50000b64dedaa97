"""Object storage needs a declared identity: every s3:// or gs:// location the
stack reads (weights, adapters) or writes (PostgreSQL backups) is reached as
`platform.cloud_identity`, and that identity must be able to reach it
(docs/decisions.md: Bucket readers act as one declared identity)."""

from __future__ import annotations

from tenantry.findings import Loc, path_str
from tenantry.spec.fields import BUCKET_SCHEMES, BucketScheme
from tenantry.spec.problems import Problem
from tenantry.spec.resolve import resolve_model
from tenantry.spec.schema import CloudIdentitySpec, Spec

PROVIDER_FIELD = {"aws": "aws_role_arn", "gcp": "gcp_service_account", "static": "credentials_secret"}
"""The one field each provider needs; the others must stay unset."""
PROVIDER_SCHEMES = {"aws": ("s3",), "gcp": ("gs",), "static": BUCKET_SCHEMES}
"""What each identity reaches: a workload identity reaches its own cloud's store only."""
PROVIDER_ENVIRONMENT = {"aws": "eks", "gcp": "gke"}
"""Where each workload identity works: IAM roles for service accounts (or EKS Pod Identity) on EKS, Workload
Identity on GKE. A stack that declares one and leaves cluster.environment at its default, bare-metal, would get
the GPU Operator's bare-metal settings (its own driver and toolkit) on the cloud's GPU images."""


def bucket_locations(spec: Spec) -> list[tuple[Loc, str]]:
    """Every object-store location of the stack, with the field it comes from."""
    found: list[tuple[Loc, str]] = []
    for i, engine in enumerate(spec.engines):
        resolved = resolve_model(engine)
        if resolved is not None:
            found.append((("engines", i, "source"), resolved.source))
        for j, adapter in enumerate(engine.adapters):
            found.append((("engines", i, "adapters", j, "source"), adapter.source))
    if spec.platform.postgres.backup_destination:
        found.append((("platform", "postgres", "backup_destination"), spec.platform.postgres.backup_destination))
    return [(loc, uri) for loc, uri in found if uri.partition("://")[0] in BUCKET_SCHEMES]


def bucket_schemes(spec: Spec) -> tuple[BucketScheme, ...]:
    used = {uri.partition("://")[0] for _, uri in bucket_locations(spec)}
    return tuple(s for s in BUCKET_SCHEMES if s in used)


def check_cloud_identity(spec: Spec) -> list[Problem]:
    identity = spec.platform.cloud_identity
    loc: Loc = ("platform", "cloud_identity")
    locations = bucket_locations(spec)
    if identity is None:
        if not locations:
            return []
        where, uri = locations[0]
        more = f" and {len(locations) - 1} more" if len(locations) > 1 else ""
        return [(loc, f"required: {path_str(where)} is {uri}{more}; say which identity reaches "
                 "object storage (provider aws with aws_role_arn, gcp with gcp_service_account, or static with "
                 "credentials_secret)")]
    problems = _check_provider_fields(identity, loc)
    wanted = PROVIDER_ENVIRONMENT.get(identity.provider)
    if wanted and spec.cluster.environment != wanted:
        problems.append(((*loc, "provider"), f"{identity.provider} is a workload identity of {wanted}, but "
                         f"cluster.environment is {spec.cluster.environment}: set cluster.environment: {wanted} "
                         f"(it also decides the GPU Operator's settings), or use provider static with a "
                         f"credentials Secret"))
    reachable = PROVIDER_SCHEMES[identity.provider]
    for where, uri in locations:
        scheme = uri.partition("://")[0]
        if scheme not in reachable:
            problems.append((where, f"{uri} is not reachable as a {identity.provider} workload identity "
                             f"(platform.cloud_identity reaches {', '.join(f'{s}://' for s in reachable)} only)"))
    return problems


def _check_provider_fields(identity: CloudIdentitySpec, loc: Loc) -> list[Problem]:
    problems: list[Problem] = []
    for provider, name in PROVIDER_FIELD.items():
        value = getattr(identity, name)
        if provider == identity.provider and value is None:
            problems.append(((*loc, name), f"required with provider {provider}"))
        elif provider != identity.provider and value is not None:
            problems.append(((*loc, name), f"belongs to provider {provider}, not {identity.provider}; remove it"))
    return problems
