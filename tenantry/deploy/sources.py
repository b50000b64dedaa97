"""Where weights and adapters come from, and how a populate Job fetches them.

hf://org/repo[@revision] is fetched by huggingface_hub at the pinned revision
(hub_fetch.py); s3://, gs:// and volumes go through rclone, whose on-the-fly
remotes need no config file (`:s3,env_auth=true:bucket/path` uses the pod's
workload identity or the static keys in its environment); pvc://claim/path
reads an existing claim, and local://path the artifacts claim the local
stack's files are published in.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from tenantry.spec.fields import BUCKET_SCHEMES

ARTIFACTS_CLAIM = "tenantry-artifacts"
SOURCES_MOUNT = "/sources"


@dataclass(frozen=True)
class Source:
    scheme: str
    location: str
    revision: str | None = None

    @property
    def claim(self) -> str | None:
        """The PersistentVolumeClaim holding this source, if it is on one."""
        if self.scheme == "pvc":
            return self.location.split("/", 1)[0]
        if self.scheme == "local":
            return ARTIFACTS_CLAIM
        return None

    @property
    def in_bucket(self) -> bool:
        return self.scheme in BUCKET_SCHEMES

    @property
    def mounted_path(self) -> str:
        """Where a claim-backed source appears inside the pod."""
        if self.scheme == "pvc":
            claim, _, path = self.location.partition("/")
            return f"{SOURCES_MOUNT}/{claim}/{path}".rstrip("/")
        return f"{SOURCES_MOUNT}/{ARTIFACTS_CLAIM}/{self.location}"

    def rclone_path(self) -> str:
        if self.scheme == "s3":
            return f":s3,provider=AWS,env_auth=true:{self.location}"
        if self.scheme == "gs":
            return f":gcs,env_auth=true:{self.location}"
        return self.mounted_path


def parse_source(uri: str) -> Source:
    scheme, _, rest = uri.partition("://")
    if scheme == "hf":
        repo, _, revision = rest.partition("@")
        return Source("hf", repo, revision or None)
    return Source(scheme, rest)


def rclone_script(items: Sequence[tuple[Source, str]]) -> str:
    """Copy each (source, destination) into place; --checksum makes a rerun after
    a restart fetch only what changed."""
    lines = ["set -eu"]
    for source, destination in items:
        lines.append(f"rclone copy --checksum --transfers 8 {shlex.quote(source.rclone_path())} {shlex.quote(destination)}")
    return "\n".join(lines) + "\n"


def hub_items(items: Sequence[tuple[Source, str]], *, whole: bool) -> str:
    """hub_fetch.py's items file: each repository at its pinned revision, into its destination."""
    return json.dumps([{"repo": s.location, "revision": s.revision, "destination": d, "whole": whole}
                       for s, d in items], indent=1, sort_keys=True) + "\n"
