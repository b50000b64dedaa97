"""Run the Pulumi program without a cluster or the Pulumi CLI.

Pulumi's mock runtime executes __main__.py exactly as `pulumi preview`
would, and records every resource it registers. The Kubernetes objects among
them are the manifests `pulumi up` would apply; Helm releases are recorded
with their chart, version and values. Secret values are kept as Secret
markers, so checks can tell them apart and dumps redact them.
"""

from __future__ import annotations

import contextlib
import runpy
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi.runtime.resource
import yaml
from pulumi.runtime.proto import source_pb2

PROGRAM = Path(__file__).resolve().parent.parent.parent / "__main__.py"
_SECRET_SIG = "4dabf18193072939515e22adb298388d"
REDACTED = "<pulumi secret>"
OFFLINE_CONFIG = {"tenantry:hfToken": "hf_offline-render-placeholder"}
"""Secret config a real stack sets with `pulumi config set --secret` (the Hub token gated models need)."""


@dataclass(frozen=True)
class Secret:
    """A value Pulumi treats as secret."""

    value: Any


@dataclass(frozen=True)
class Recorded:
    type: str
    name: str
    inputs: dict[str, Any]
    parent_type: str | None = None
    """Type token of the component that registered it (None for top-level resources)."""
    parent_name: str | None = None
    urn: str = ""
    parent_urn: str | None = None
    """The URN of the component that registered it (None for top-level resources)."""
    dependencies: tuple[str, ...] = ()
    """URNs of the resources Pulumi creates before this one: `depends_on` (a
    component expanded to its children) and the resources its inputs come from."""

    @property
    def is_kubernetes(self) -> bool:
        return self.type.startswith("kubernetes:")

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]


@dataclass
class Rendering:
    stack: str
    resources: list[Recorded] = field(default_factory=list)
    exports: dict[str, Any] = field(default_factory=dict)

    def of_type(self, kind: str) -> list[Recorded]:
        return [r for r in self.resources if r.kind == kind]

    def manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the program creates or patches, as applied."""
        return [manifest(r) for r in self.resources if r.is_kubernetes and r.kind != "Release"]

    def releases(self) -> list[Recorded]:
        return self.of_type("Release")

    def engine_urn(self, resource: Recorded) -> str:
        """The URN the Pulumi engine gives a resource, as `pulumi up --target` takes it: its type qualified by
        every enclosing component's type, the stack's own excluded. The mock's URNs carry only the parent's type,
        and the stack's (`pulumi:pulumi:Stack$...`)."""
        head = resource.urn.rsplit("::", 2)[0]  # urn:pulumi:<stack>::<project>
        components = {r.urn: r for r in self.resources if r.urn}
        chain, parent = [resource.type], components.get(resource.parent_urn or "")
        while parent is not None:
            chain.insert(0, parent.type)
            parent = components.get(parent.parent_urn or "")
        return f"{head}::{'$'.join(chain)}::{resource.name}"


def _plain(value: Any) -> Any:
    """Mock inputs as Python values: secret wrappers become Secret markers,
    numbers that arrived as floats but are whole become ints again."""
    if isinstance(value, dict):
        if value.get(_SECRET_SIG) is not None and "value" in value:
            return Secret(_plain(value["value"]))
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def manifest(resource: Recorded) -> dict[str, Any]:
    """The object for a kubernetes:<group>/<version>:<Kind> resource; a NodePatch
    becomes the Node fields it patches."""
    group_version = resource.type.split(":")[1]
    kind = resource.kind.removesuffix("Patch")
    api_version = group_version.removeprefix("core/")
    body = {k: v for k, v in resource.inputs.items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": api_version, "kind": kind, **body}


class _Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[Recorded] = []
        # Registrations arrive on several threads; each knows its own request.
        self.registering = threading.local()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):  # type: ignore[override]
        inputs = _plain(args.inputs)
        parent_type = parent_name = None
        parent_urn: str | None = getattr(self.registering, "parent", "")
        if parent_urn and "::" in parent_urn:
            *_, type_chain, parent_name = parent_urn.split("::")
            parent_type = type_chain.rsplit("$", 1)[-1]
            if parent_type == "pulumi:pulumi:Stack":
                parent_type = parent_name = parent_urn = None
        self.resources.append(Recorded(
            args.typ, args.name, inputs, parent_type, parent_name, urn=getattr(self.registering, "urn", ""),
            parent_urn=parent_urn or None, dependencies=tuple(getattr(self.registering, "dependencies", ())),
        ))
        outputs = dict(args.inputs)
        if args.typ == "random:index/randomPassword:RandomPassword":
            # Distinct, recognisable stand-ins: a check can then prove none leaks into plain text.
            outputs["result"] = f"mock-secret-{args.name}"
        return [f"{args.name}-id", outputs]

    def call(self, args: pulumi.runtime.MockCallArgs):  # type: ignore[override]
        return {}


class _ParentAwareMonitor(pulumi.runtime.mocks.MockMonitor):
    """Tells the recorder each resource's URN, the component it belongs to and
    what it depends on (the request carries them; the mock's arguments do not)."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__(recorder)
        self.recorder = recorder

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method's name
        registering = self.recorder.registering
        registering.parent = request.parent
        registering.urn = self.make_urn(request.parent, request.type, request.name)
        registering.dependencies = sorted(request.dependencies)
        return super().RegisterResource(request)


@contextlib.contextmanager
def _no_source_positions() -> Iterator[None]:
    """The SDK walks the whole Python stack of every registration to tell the engine where in the program the
    resource was made (pulumi/runtime/resource.py: _get_stack_trace), for the CLI's diagnostics. A mock render
    has no CLI to show them; skipped, 1,000 tenants render about a seventh faster (docs/decisions.md: The
    largest shipped stack renders in 30 s). Left alone if a later SDK renames it."""
    resource_runtime = pulumi.runtime.resource
    captured = getattr(resource_runtime, "_get_stack_trace", None)
    if captured is None:
        yield
        return
    resource_runtime._get_stack_trace = source_pb2.StackTrace  # an empty trace: no source position
    try:
        yield
    finally:
        resource_runtime._get_stack_trace = captured


def render(spec_path: str | Path, stack: str | None = None, config: dict[str, str] | None = None) -> Rendering:
    """Run __main__.py for the stack whose spec is at `spec_path`, with `config` as its
    secret config (a placeholder Hub token unless given)."""
    stack_name = stack or Path(spec_path).stem
    recorder = _Recorder()
    pulumi.runtime.set_mocks(recorder, project="tenantry", stack=stack_name, preview=True,
                             monitor=_ParentAwareMonitor(recorder))
    secrets = OFFLINE_CONFIG if config is None else config
    pulumi.runtime.set_all_config({"tenantry:spec": str(spec_path), **secrets}, secret_keys=list(secrets))
    rendering = Rendering(stack_name)
    real_export = pulumi.export

    def record_export(name: str, value: Any) -> None:
        pulumi.Output.from_input(value).apply(lambda v: rendering.exports.__setitem__(name, v))

    @pulumi.runtime.test
    def program() -> None:
        runpy.run_path(str(PROGRAM), run_name="__main__")

    pulumi.export = record_export  # type: ignore[assignment]
    try:
        with _no_source_positions():
            program()
    finally:
        pulumi.export = real_export  # type: ignore[assignment]
    rendering.resources = recorder.resources
    return rendering


def redacted(value: Any, secret: bool = False) -> Any:
    """Secret values replaced by a marker, keeping the keys of secret mappings
    (Pulumi marks a whole stringData secret when one of its values is)."""
    if isinstance(value, Secret):
        return redacted(value.value, True)
    if isinstance(value, dict):
        return {k: redacted(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, secret) for v in value]
    return REDACTED if secret else value


def _ordered(obj: dict[str, Any]) -> dict[str, Any]:
    """apiVersion, kind and metadata first, as people read manifests; the rest sorted."""
    head = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    return {**head, **{k: obj[k] for k in sorted(obj) if k not in head}}


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(_ordered(_sorted(redacted(obj))), sort_keys=False)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def write(rendering: Rendering, out_dir: str | Path) -> list[Path]:
    """One YAML file per object (secrets redacted), ordered and named so a diff
    between two renders reads well; Helm releases under releases/."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for obj in rendering.manifests():
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace", "_cluster")
        path = out / namespace / f"{obj['kind']}-{meta.get('name', 'unnamed')}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_yaml(obj), encoding="utf-8")
        written.append(path)
    for release in rendering.releases():
        path = out / "releases" / f"{release.inputs.get('name', release.name)}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {k: release.inputs.get(k) for k in ("name", "namespace", "chart", "version", "repositoryOpts", "values")}
        path.write_text(yaml.safe_dump(_sorted(redacted(record)), sort_keys=False), encoding="utf-8")
        written.append(path)
    return written
