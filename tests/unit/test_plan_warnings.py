"""Every warning the Plan can give, each brought on by one change to the base spec (which plans without a
warning): the warning must point at the field to change and say why, and the base's other figures stay quiet.
A warning added to tenantry/plan without a case here fails test_every_warning_in_the_planner_has_a_case."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tests.unit.specs import Mutation, base_spec, chain, delete_field, set_field, to_yaml

PLANNER = Path(__file__).resolve().parents[2] / "tenantry" / "plan"

# alpha (guaranteed) sends everything to engine big (512 sequence slots at its typical context).
_ALPHA_ON_BIG_ONLY = chain(
    set_field("tenants.0.models", ["big"]), set_field("tenants.0.adapters", []),
    set_field("tenants.0.traffic", [{"target": "big", "share": 1.0}]),
    set_field("engines.1.adapters.0.tenant", "beta"), set_field("engines.1.adapters.0.name", "beta-support"),
    set_field("tenants.1.adapters", ["beta-legal", "beta-support"]),
)
_SPARE_ENGINE = {"name": "spare", "model": "llama-3.1-70b", "weights": "fp8", "max_context": 8192,
                 "placement": {"pool": "whole", "tensor_parallel": 4}, "replicas": 1}
_CUSTOM_MODEL = chain(
    set_field("engines.0.model", "custom-7b"), set_field("engines.0.revision", "v1"),
    set_field("engines.0.source", "s3://models/custom-7b"),
    set_field("engines.0.architecture", {
        "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8, "head_dim": 128,
        "intermediate_size": 14336, "vocab_size": 128256, "total_parameters": 70_000_000_000, "max_context": 8192}),
)

# (id, change, path of the warning, words it must contain)
WARNINGS: list[tuple[str, Mutation, str, str]] = [
    ("most-tenants-guaranteed", set_field("tenants.1.tier", "guaranteed"), "tenants",
     "2 of 3 tenants are guaranteed (alpha, beta)"),
    ("most-slots-reserved", chain(_ALPHA_ON_BIG_ONLY, set_field("tenants.0.max_concurrency", 300)), "engines[0]",
     "reserve 300 of 512 concurrent sequences (59%)"),
    ("best-effort-beyond-shared", set_field("tenants.1.max_concurrency", 500), "engines[1]",
     "best-effort tenants may have 500 requests in flight but only 198 slots"),
    ("spot-never-admitted", chain(_ALPHA_ON_BIG_ONLY, set_field("tenants.0.max_concurrency", 512)), "engines[0]",
     "spot tenants will never be admitted"),
    ("overcommit", set_field("tenants.2.tpm", 3_000_000), "engines[0]", "that holds only while they do not all peak"),
    ("autoscaling-with-nothing-to-scale", set_field("engines.0.autoscaling", {"max_replicas": 2}),
     "engines[0].autoscaling.max_replicas", "equals replicas (2): there is nothing to scale"),
    ("kv-aware-with-one-replica", chain(set_field("engines.0.replicas", 1), set_field("engines.0.routing", "kv-aware")),
     "engines[0].routing", "the endpoint picker has no replica to choose between"),
    ("engine-without-traffic", chain(set_field("engines.0.replicas", 1), set_field("engines.2", _SPARE_ENGINE)),
     "engines[2]", "no tenant sends traffic here"),
    ("architecture-total-off", _CUSTOM_MODEL, "engines[0].architecture.total_parameters", "the shape implies about"),
    ("rank-rounded-up", set_field("engines.1.adapters.0.rank", 24), "engines[1].adapters",
     "vLLM only takes --max-lora-rank 32"),
    ("rank-spread", set_field("engines.1.adapters.0.rank", 64), "engines[1].adapters",
     "adapter ranks range from 8 to 64"),
    ("guaranteed-adapter-waits", set_field("engines.1.lora", {"max_loras": 1}), "engines[1].lora.max_loras",
     "guaranteed tenant(s) alpha can wait behind other adapters"),
    ("adapters-beyond-warm-cache", set_field("engines.1.lora", {"max_loras": 1, "cpu_cache_gib": 0.015}),
     "engines[1].lora.cpu_cache_gib", "2 adapters but 1 stay warm in host memory"),
    ("mig-without-reboot-on-a-cloud", chain(set_field("cluster.environment", "eks"),
                                            set_field("cluster.gpu_operator", {"mig_reboot": False})),
     "cluster.gpu_operator.mig_reboot", "false on eks"),
    ("one-gateway-replica", set_field("gateway.replicas", 1), "gateway.replicas",
     "every request fails while it restarts"),
    ("no-backups", delete_field("platform.postgres.backup_destination"), "platform.postgres.backup_destination",
     "not backed up"),
    ("read-write-many-on-the-default-class", set_field("platform.model_cache", {"access_mode": "ReadWriteMany"}),
     "platform.model_cache.storage_class", "must offer ReadWriteMany"),
]


@pytest.mark.parametrize(("change", "path", "words"), [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_each_warning_names_its_field_and_its_reason(change, path, words):
    result = plan(load_spec_text(to_yaml(change(base_spec()))), "test")
    assert result.fits, [str(r) for r in result.refusals]
    at_path = [w.message for w in result.warnings if w.path == path]
    assert any(words in message for message in at_path), [str(w) for w in result.warnings]


def test_the_base_spec_plans_without_a_warning():
    result = plan(load_spec_text(to_yaml(base_spec())), "test")
    assert result.fits and not result.warnings, [str(w) for w in result.warnings]


def test_a_single_guaranteed_tenant_is_no_anti_pattern():
    spec = base_spec()
    spec["tenants"] = spec["tenants"][:1]
    spec["engines"][1]["adapters"] = spec["engines"][1]["adapters"][:1]
    result = plan(load_spec_text(to_yaml(spec)), "test")
    assert not [w for w in result.warnings if w.path == "tenants"], [str(w) for w in result.warnings]


def _warning_sites() -> int:
    """Calls of .warn(...) in the planner, the helpers that forward them (Notes, EngineNotes) left out."""
    sites = 0
    for source in PLANNER.glob("*.py"):
        if source.name == "notes.py":
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn":
                sites += 1
    return sites


def test_every_warning_in_the_planner_has_a_case():
    assert _warning_sites() == len(WARNINGS), "a warning was added or removed in tenantry/plan: give it a case here"
