"""Every kind of bad input is refused with the field path and the reason.

Invalid specs (exit 2) raise SpecError; valid specs that do not fit (exit 1)
plan with refusals. Each case names the path it must point at and words the
reason must contain, so a vague or misplaced message fails the test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tenantry.findings import SpecError
from tenantry.plan import plan
from tenantry.spec import load_spec_text
from tests.unit.specs import base_spec, to_yaml
from tests.unit.specs import chain as _chain
from tests.unit.specs import delete_field as _delete
from tests.unit.specs import set_field as _set

Spec = dict[str, Any]


def _duplicate_tenant(spec: Spec) -> Spec:
    spec["tenants"].append(dict(spec["tenants"][2]))
    return spec


def _adapter(**changes: Any) -> Callable[[Spec], Spec]:
    def mutate(spec: Spec) -> Spec:
        spec["engines"][1]["adapters"][0].update(changes)
        return spec

    return mutate


# (id, mutation, path the finding must name, words the message must contain)
INVALID: list[tuple[str, Callable[[Spec], Spec], str, str]] = [
    ("unknown-gpu", _set("cluster.node_pools.0.gpu", "H100"), "cluster.node_pools[0].gpu", "unknown GPU type 'H100'"),
    ("mig-profile-not-offered", _set("cluster.node_pools.1.mig_layout", ["3g.40gb", "1g.5gb"]),
     "cluster.node_pools[1].mig_layout[1]", "not a MIG profile of A100-80GB"),
    ("mig-combination-does-not-fit", _set("cluster.node_pools.1.mig_layout", ["3g.40gb", "3g.40gb", "1g.10gb"]),
     "cluster.node_pools[1].mig_layout", "cannot be carved"),
    ("mig-on-gpu-without-mig", _chain(_set("cluster.node_pools.1.gpu", "L40S-48GB")),
     "cluster.node_pools[1].mig_layout", "does not support MIG"),
    ("too-many-instances", _set("cluster.node_pools.1.mig_layout", ["4g.40gb", "4g.40gb"]),
     "cluster.node_pools[1].mig_layout", "cannot be carved"),
    ("tp-not-dividing-node", _set("engines.0.placement.tensor_parallel", 3), "engines[0].placement.tensor_parallel",
     "does not divide the 8 GPUs"),
    ("tp-larger-than-node", _set("engines.0.placement.tensor_parallel", 16), "engines[0].placement.tensor_parallel",
     "does not divide the 8 GPUs"),
    ("tp-on-mig-pool", _set("engines.1.placement.tensor_parallel", 2), "engines[1].placement.tensor_parallel",
     "cannot span MIG slices"),
    ("mig-pool-without-profile", _delete("engines.1.placement.mig_profile"), "engines[1].placement.mig_profile",
     "is a MIG pool"),
    ("profile-on-whole-gpu-pool", _set("engines.0.placement.mig_profile", "3g.40gb"),
     "engines[0].placement.mig_profile", "whole GPUs"),
    ("profile-not-in-pool-layout", _set("engines.1.placement.mig_profile", "1g.10gb"),
     "engines[1].placement.mig_profile", "carves"),
    ("guaranteed-tier-capped", _set("tiers", {"guaranteed": {"priority": 0, "max_engine_slots": 4}}),
     "tiers.guaranteed.max_engine_slots", "no cap may take away"),
    ("unknown-pool", _set("engines.0.placement.pool", "wholes"), "engines[0].placement.pool", "did you mean 'whole'"),
    ("tp-not-dividing-heads", _chain(_set("engines.1.model", "qwen2.5-7b"), _set("engines.1.placement", {"pool": "whole", "tensor_parallel": 8}),
                                     _set("engines.1.adapters", [])),
     "engines[1].placement.tensor_parallel", "28 attention heads"),
    ("unknown-model", _set("engines.0.model", "llama-3.1-80b"), "engines[0].model", "not in the catalog"),
    ("architecture-without-revision", _set("engines.0.architecture", {
        "layers": 4, "hidden_size": 512, "attention_heads": 8, "kv_heads": 8, "head_dim": 64,
        "intermediate_size": 1024, "vocab_size": 1000, "total_parameters": 20000000, "max_context": 4096}),
     "engines[0].architecture", "catalog model"),
    ("kv-heads-not-dividing", _chain(_set("engines.0.model", "custom-7b"), _set("engines.0.revision", "v1"),
                                     _set("engines.0.source", "s3://models/custom-7b"),
                                     _set("engines.0.architecture", {
                                         "layers": 4, "hidden_size": 512, "attention_heads": 8, "kv_heads": 3,
                                         "head_dim": 64, "intermediate_size": 1024, "vocab_size": 1000,
                                         "total_parameters": 20000000, "max_context": 4096})),
     "engines[0].architecture", "multiple of kv_heads"),
    ("context-beyond-model", _set("engines.1.max_context", 200000), "engines[1].max_context", "131072 tokens"),
    ("unpinned-revision", _set("engines.0.revision", "latest"), "engines[0].revision", "pin a commit"),
    ("reserve-eats-claim", _chain(_set("engines.0.runtime_reserve_fraction", 0.5),
                                  _set("engines.0.gpu_memory_utilization", 0.5)), "engines[0].runtime_reserve_fraction",
     "leaves nothing"),
    ("utilisation-above-one", _set("engines.0.gpu_memory_utilization", 1.5), "engines[0].gpu_memory_utilization",
     "less than or equal to 1"),
    ("unknown-weight-format", _set("engines.0.weights", "int8"), "engines[0].weights", "must be one of"),
    ("adapter-for-another-base", _adapter(base_model="llama-3.1-70b"), "engines[1].adapters[0].base_model",
     "trained on 'llama-3.1-70b'"),
    ("adapter-for-another-revision", _adapter(base_revision="abc123"), "engines[1].adapters[0].base_revision",
     "revision 'abc123'"),
    ("adapter-rank-zero", _adapter(rank=0), "engines[1].adapters[0].rank", "greater than or equal to 1"),
    ("adapter-rank-above-256", _adapter(rank=512), "engines[1].adapters[0].rank", "less than or equal to 256"),
    ("adapter-unknown-module", _adapter(target_modules=["q_proj", "lm_head"]), "engines[1].adapters[0].target_modules[1]",
     "must be one of"),
    ("adapter-unknown-owner", _adapter(tenant="alfa"), "engines[1].adapters[0].tenant", "did you mean 'alpha'"),
    ("adapter-named-like-engine", _adapter(name="big"), "engines[1].adapters[0].name", "also an engine name"),
    ("adapter-bad-source", _adapter(source="ftp://x"), "engines[1].adapters[0].source", "not a source URI"),
    ("tenant-model-not-served", _set("tenants.0.models", ["big", "qwen3-32b"]), "tenants[0].models[1]",
     "not served by any engine"),
    ("tenant-uses-another-tenants-adapter", _set("tenants.0.adapters", ["beta-legal"]), "tenants[0].adapters[0]",
     "belongs to tenant 'beta'"),
    ("tenant-adapter-listed-as-model", _set("tenants.2.models", ["alpha-support"]), "tenants[2].models[0]",
     "list it under adapters"),
    ("tenant-calls-nothing", _chain(_set("tenants.2.models", [])), "tenants[2].models", "may call nothing"),
    ("overload-fallback-outside-the-allow-list", _set("tenants.2.overload_fallback", ["small"]),
     "tenants[2].overload_fallback[0]", "'small' is not one of the tenant's models (big)"),
    ("overload-fallback-listed-twice", _set("tenants.0.overload_fallback", ["small", "small"]),
     "tenants[0].overload_fallback", "lists 'small' 2 times"),
    ("duplicate-tenant-names", _duplicate_tenant, "tenants[3].name", "already used by tenants[2]"),
    ("duplicate-engine-names", _set("engines.1.name", "big"), "engines[1].name", "already used by engines[0]"),
    ("duplicate-pool-names", _set("cluster.node_pools.1.name", "whole"), "cluster.node_pools[1].name", "already used"),
    ("salt-with-at", _set("tenants.0.cache", {"isolation": "own", "salt": "acme@prod"}), "tenants[0].cache.salt", "'@'"),
    ("salt-with-slash", _set("tenants.0.cache", {"isolation": "own", "salt": "acme/prod"}), "tenants[0].cache.salt", "'/'"),
    ("salt-with-backslash", _set("tenants.0.cache", {"isolation": "own", "salt": "acme\\prod"}), "tenants[0].cache.salt",
     "backslash"),
    ("salt-with-nul", _set("tenants.0.cache", {"isolation": "own", "salt": "acme\x00"}), "tenants[0].cache.salt", "NUL"),
    ("salt-too-long", _set("tenants.0.cache", {"isolation": "own", "salt": "s" * 129}), "tenants[0].cache.salt",
     "at most 128 characters, got 129"),
    ("salt-empty", _set("tenants.0.cache", {"isolation": "own", "salt": ""}), "tenants[0].cache.salt", "must not be empty"),
    ("salt-shared-by-two-own-tenants", _chain(_set("tenants.0.cache", {"isolation": "own", "salt": "same"}),
                                               _set("tenants.2.cache", {"isolation": "own", "salt": "same"})),
     "tenants[2].cache.salt", "also tenant 'alpha''s own salt"),
    ("shared-cache-without-group", _set("tenants.1.cache", {"isolation": "shared"}), "tenants[1].cache", "needs a group"),
    ("zero-tpm", _set("tenants.0.tpm", 0), "tenants[0].tpm", "greater than or equal to 1, got 0"),
    ("negative-rpm", _set("tenants.1.rpm", -5), "tenants[1].rpm", "got -5"),
    ("zero-concurrency", _set("tenants.2.max_concurrency", 0), "tenants[2].max_concurrency", "got 0"),
    ("zero-budget", _set("tenants.0.budget.usd", 0), "tenants[0].budget.usd", "greater than 0"),
    ("malformed-budget-window", _set("tenants.0.budget.window", "monthly"), "tenants[0].budget.window",
     "not a budget window"),
    ("budget-window-zero", _set("tenants.0.budget.window", "0d"), "tenants[0].budget.window", "not a budget window"),
    ("slo-ttft-zero", _set("tenants.0.slo.ttft_p95_ms", 0), "tenants[0].slo.ttft_p95_ms", "greater than 0"),
    ("slo-itl-zero", _set("tenants.0.slo.itl_p95_ms", 0), "tenants[0].slo.itl_p95_ms", "greater than 0"),
    ("slo-error-rate-above-one", _set("tenants.0.slo.max_error_rate", 1.5), "tenants[0].slo.max_error_rate",
     "less than or equal to 1"),
    ("slo-missing", _delete("tenants.1.slo"), "tenants[1].slo", "required"),
    ("unknown-tier", _set("tenants.0.tier", "premium"), "tenants[0].tier", "must be one of"),
    ("traffic-shares-not-one", _set("tenants.0.traffic.0.share", 0.6), "tenants[0].traffic", "sum to 1.1"),
    ("traffic-to-unallowed-target", _set("tenants.0.traffic.1.target", "beta-legal"), "tenants[0].traffic[1].target",
     "not among the tenant's models"),
    ("typical-request-longer-than-context", _set("tenants.1.typical", {"prompt_tokens": 4000, "output_tokens": 500}),
     "tenants[1].typical", "exceeds engine 'small''s max_context of 4096"),
    ("unknown-key-typo", _chain(_delete("tenants.0.tpm"), _set("tenants.0.tmp", 5)), "tenants[0].tmp",
     "did you mean 'tpm'"),
    ("unknown-top-level-key", _set("tenant", []), "tenant", "did you mean 'tenants'"),
    ("number-as-text", _set("tenants.0.tpm", "1e6"), "tenants[0].tpm", "write it unquoted"),
    ("version-as-number", _set("cluster.kubernetes_version", 1.3), "cluster.kubernetes_version", "quote it"),
    ("version-out-of-range", _set("cluster.kubernetes_version", "1.21"), "cluster.kubernetes_version", "1.25 to 1.37"),
    ("version-older-than-every-pin-supports", _set("cluster.kubernetes_version", "1.31"), "cluster.kubernetes_version",
     "1.31 is outside 1.34 to 1.36, the Kubernetes versions every pinned component supports"),
    ("version-newer-than-every-pin-supports", _set("cluster.kubernetes_version", "1.37"), "cluster.kubernetes_version",
     "1.37 is outside 1.34 to 1.36"),
    ("bad-name", _set("tenants.0.name", "Alpha_Team"), "tenants[0].name", "not a valid name"),
    ("priorities-not-rising", _set("tiers", {"guaranteed": {"priority": 50}}), "tiers", "must rise"),
    ("fallback-to-unknown", _set("gateway.fallbacks", [{"model": "big", "to": ["huge"]}]), "gateway.fallbacks[0].to[0]",
     "no engine named 'huge'"),
    ("fallback-to-itself", _set("gateway.fallbacks", [{"model": "big", "to": ["big"]}]), "gateway.fallbacks[0].to[0]",
     "fall back to itself"),
    ("spot-shed-after-best-effort", _set("gateway.admission", {"shed_spot_at_kv_usage": 0.95}),
     "gateway.admission.shed_spot_at_kv_usage", "spot is shed first"),
    ("no-engines", _set("engines", []), "engines", "at least 1 item"),
    ("engine-not-a-mapping", _set("engines.0", "llama"), "engines[0]", "must be a mapping"),
    ("nan-price", _set("cluster.node_pools.0.gpu_hour_price_usd", float("nan")), "cluster.node_pools[0].gpu_hour_price_usd",
     "finite number"),
    ("boolean-as-number", _set("engines.0.replicas", True), "engines[0].replicas", "must be a valid integer"),
    ("node-names-not-matching-count", _set("cluster.node_pools.0.node_names", ["a", "b"]),
     "cluster.node_pools[0].node_names", "lists 2 nodes but the pool has nodes: 1"),
    ("node-in-two-pools", _set("cluster.node_pools.1.node_names", ["gpu-whole-0"]),
     "cluster.node_pools[1].node_names[0]", "already in pool 'whole'"),
    ("hub-adapter-without-revision", _adapter(source="hf://acme/support-lora"), "engines[1].adapters[0].source",
     "pin the revision"),
    ("awq-without-checkpoint", _set("engines.0.weights", "int4-awq"), "engines[0].source", "needs an AWQ checkpoint"),
    ("backup-destination-not-object-store", _set("platform.postgres.backup_destination", "/var/backups"),
     "platform.postgres.backup_destination", "not an object store location"),
    ("backup-schedule-five-fields", _set("platform.postgres.backup_schedule", "0 3 * * *"),
     "platform.postgres.backup_schedule", "six-field cron"),
    ("bucket-without-identity", _delete("platform.cloud_identity"), "platform.cloud_identity",
     "required: engines[1].adapters[0].source is s3://adapters/alpha/support and 2 more"),
    ("aws-identity-without-role", _set("platform.cloud_identity", {"provider": "aws"}),
     "platform.cloud_identity.aws_role_arn", "required with provider aws"),
    ("identity-field-of-another-provider", _set("platform.cloud_identity.credentials_secret", "bucket-keys"),
     "platform.cloud_identity.credentials_secret", "belongs to provider static, not aws"),
    ("aws-identity-for-a-gcs-bucket", _set("platform.postgres.backup_destination", "gs://tenantry-test/postgres"),
     "platform.postgres.backup_destination", "not reachable as a aws workload identity"),
    ("aws-identity-off-eks", _set("cluster.environment", "bare-metal"), "platform.cloud_identity.provider",
     "aws is a workload identity of eks, but cluster.environment is bare-metal: set cluster.environment: eks"),
    ("gcp-identity-off-gke", _chain(_set("platform.cloud_identity", {"provider": "gcp", "gcp_service_account":
                                                                      "tenantry@project.iam.gserviceaccount.com"}),
                                    _set("platform.postgres.backup_destination", "gs://tenantry-test/postgres")),
     "platform.cloud_identity.provider", "gcp is a workload identity of gke, but cluster.environment is"),
    ("malformed-role-arn", _set("platform.cloud_identity.aws_role_arn", "tenantry-buckets"),
     "platform.cloud_identity.aws_role_arn", "does not match the pattern ^arn:aws"),
    ("unknown-identity-provider", _set("platform.cloud_identity.provider", "azure"),
     "platform.cloud_identity.provider", "'aws', 'gcp' or 'static'"),
    ("unknown-cluster-environment", _set("cluster.environment", "openshift"), "cluster.environment",
     "'bare-metal', 'eks', 'gke' or 'aks'"),
    ("unknown-driver-source", _set("cluster.gpu_operator", {"driver": "host"}), "cluster.gpu_operator.driver",
     "'operator' or 'preinstalled'"),
    ("unknown-gpu-operator-setting", _set("cluster.gpu_operator", {"with_reboot": True}),
     "cluster.gpu_operator.with_reboot", "did you mean 'mig_reboot'"),
    ("unknown-metrics-api-source", _set("cluster.metrics_api", "prometheus"), "cluster.metrics_api",
     "'install' or 'present'"),
    ("second-metrics-server-on-gke", _chain(_set("cluster.environment", "gke"), _set("cluster.metrics_api", "install")),
     "cluster.metrics_api", "a second would contend for the APIService v1beta1.metrics.k8s.io"),
    ("backup-schedule-hour-25", _set("platform.postgres.backup_schedule", "0 0 25 * * *"),
     "platform.postgres.backup_schedule", "'0 0 25 * * *' is not a schedule: six fields, seconds first"),
    ("runbooks-as-a-path-on-a-gpu-stack", _set("platform.runbook_base_url", "runbooks"), "platform.runbook_base_url",
     "'runbooks' is not a link: pool whole has GPUs"),
]


@pytest.mark.parametrize(("mutate", "path", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_spec_is_refused_with_path_and_reason(mutate, path, words):
    text = to_yaml(mutate(base_spec()))
    with pytest.raises(SpecError) as caught:
        load_spec_text(text)
    findings = caught.value.findings
    matching = [f for f in findings if f.path == path]
    assert matching, f"no finding at {path}; got {[str(f) for f in findings]}"
    assert any(words in f.message for f in matching), [str(f) for f in matching]
    assert all(f.line is not None for f in findings), "every finding should carry its YAML line"


def test_there_are_at_least_40_distinct_invalid_specs():
    assert len({case[0] for case in INVALID}) == len(INVALID) >= 40


def test_every_problem_is_listed_not_just_the_first():
    spec = base_spec()
    spec["tenants"][0]["tpm"] = 0
    spec["tenants"][1]["rpm"] = -1
    spec["cluster"]["node_pools"][0]["gpu"] = "H100"
    with pytest.raises(SpecError) as caught:
        load_spec_text(to_yaml(spec))
    # Schema errors come first (cross-checks need a typed spec), all of them.
    assert {f.path for f in caught.value.findings} == {"tenants[0].tpm", "tenants[1].rpm"}
    spec = base_spec()
    spec["cluster"]["node_pools"][0]["gpu"] = "H100"
    spec["tenants"][0]["models"] = ["nope"]
    spec["engines"][1]["adapters"][0]["base_model"] = "mistral-7b"
    with pytest.raises(SpecError) as caught:
        load_spec_text(to_yaml(spec))
    assert {f.path for f in caught.value.findings} >= {
        "cluster.node_pools[0].gpu", "tenants[0].models[0]", "engines[1].adapters[0].base_model"
    }


def test_findings_name_the_tenant_and_line():
    spec = base_spec()
    spec["tenants"][1]["rpm"] = -5
    text = to_yaml(spec)
    with pytest.raises(SpecError) as caught:
        load_spec_text(text)
    finding = caught.value.findings[0]
    assert "(tenant beta)" in finding.message
    assert text.splitlines()[finding.line - 1].strip().startswith("rpm: -5")


# --- YAML itself -----------------------------------------------------------------------------


def _refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_spec_text(text)
    return caught.value


def test_yaml_syntax_error_names_its_line():
    text = to_yaml(base_spec()).replace("tpm: 30000", "tpm: [30000")
    error = _refused(text)
    assert "YAML syntax error" in error.findings[0].message
    assert error.findings[0].line is not None and error.findings[0].line > 1


def test_empty_file():
    assert "empty" in _refused("").findings[0].message
    assert "empty" in _refused("# only a comment\n").findings[0].message


def test_not_a_mapping():
    assert "a spec is a mapping" in _refused("- a\n- b\n").findings[0].message


def test_duplicate_keys_are_refused_not_silently_merged():
    text = to_yaml(base_spec()).replace("  tpm: 50000\n", "  tpm: 50000\n  tpm: 5\n", 1)
    finding = _refused(text).findings[0]
    assert "key 'tpm' appears twice" in finding.message and finding.path == "tenants[0]"


def test_alias_bomb_is_refused_before_expansion():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    assert "expands to more than" in _refused(bomb).findings[0].message


def test_unknown_yaml_tag_is_refused():
    assert _refused("cluster: !!python/object:os.system ls\n").findings


def test_deep_nesting_is_refused():
    assert _refused("a: " + "[" * 5000 + "]" * 5000 + "\n").findings


# --- valid specs that do not fit: refusals with paths ---------------------------------------

_ALPHA_ON_BIG_ONLY = _chain(_set("tenants.0.models", ["big"]), _set("tenants.0.adapters", []),
                            _set("tenants.0.traffic", [{"target": "big", "share": 1.0}]))
_SMALLER_ON_THE_SLICED_POOL = {"name": "smaller", "model": "llama-3.2-3b", "max_context": 4096,
                               "placement": {"pool": "sliced", "mig_profile": "2g.20gb"}, "replicas": 1}

NOT_FITTING: list[tuple[str, Callable[[Spec], Spec], str, str]] = [
    ("model-too-large-for-gpus", _set("engines.0.placement.tensor_parallel", 1), "engines[0].placement",
     "weights need"),
    ("model-too-large-for-slice", _chain(_set("engines.1.placement.mig_profile", "2g.20gb"),
                                          _set("engines.1.weights", "bf16"), _set("engines.1.model", "qwen2.5-32b"),
                                          _set("engines.1.adapters", []), _set("tenants.0.adapters", []),
                                          _set("tenants.1.adapters", []),
                                          _set("tenants.0.traffic", [{"target": "big", "share": 0.5},
                                                                     {"target": "small", "share": 0.5}])),
     "engines[1].placement", "slice"),
    ("context-does-not-fit-slice", _chain(_set("engines.1.max_context", 131072),
                                          _set("engines.1.placement.mig_profile", "2g.20gb")),
     "engines[1].max_context", "less than one 131,072-token sequence"),
    ("guaranteed-reservations-exceed-capacity", _chain(_set("tenants.0.max_concurrency", 5000),
                                                       _set("tenants.0.tpm", 500)),
     "engines[0]", "guaranteed tenants reserve"),
    ("guaranteed-tpm-overcommitted", _set("tenants.0.tpm", 900_000_000), "engines[0]", "guaranteed tenants alone"),
    ("fp8-quantised-on-load-does-not-fit", _chain(_set("engines.0.placement.tensor_parallel", 1),
                                                  _set("engines.0.model", "qwen2.5-72b"),
                                                  _set("cluster.node_pools.0.gpu", "H200-141GB")),
     "engines[0].weights", "bf16 weights per GPU must fit first"),
    ("pool-out-of-gpus", _set("engines.0.replicas", 3), "cluster.node_pools[0]", "tensor-parallel groups of 4, 4, 4"),
    ("pool-out-of-slices", _set("engines.1.replicas", 5), "cluster.node_pools[1]", "need 5 3g.40gb slices"),
    ("lora-slots-do-not-fit", _set("engines.1.lora", {"max_loras": 1000}), "engines[1].lora.max_loras",
     "adapter slots"),
    ("lora-budget-too-small", _set("engines.1.lora", {"gpu_memory_fraction": 0.0001}),
     "engines[1].lora.gpu_memory_fraction", "one adapter slot"),
    ("cpu-cache-too-small", _set("engines.1.lora", {"cpu_cache_gib": 0.001}), "engines[1].lora.cpu_cache_gib",
     "max_cpu_loras >= max_loras"),
    ("spot-cap-beyond-the-shared-slots", _set("tiers", {"spot": {"priority": 100, "max_engine_slots": 600}}),
     "tiers.spot.max_engine_slots", "more than the 502 unreserved slots of engine big"),
    # Autoscaling (tenantry/plan/autoscaling.py): big runs 2 replicas of TP 4 on the whole pool's 8 GPUs.
    ("autoscaling-ceiling-below-the-floor", _set("engines.0.autoscaling", {"max_replicas": 1}),
     "engines[0].autoscaling.max_replicas", "1 is fewer than replicas (2), the autoscaler's floor"),
    ("autoscaling-ceiling-beyond-the-pool", _set("engines.0.autoscaling", {"max_replicas": 3}),
     "cluster.node_pools[0]", "tensor-parallel groups of 4, 4, 4"),
    ("autoscaling-ceiling-beyond-the-slices", _set("engines.1.autoscaling", {"max_replicas": 5}),
     "cluster.node_pools[1]", "need 5 3g.40gb slices"),
    ("autoscaling-across-nodes-on-one-claim", _chain(_set("cluster.node_pools.0.nodes", 2),
                                                     _set("cluster.node_pools.0.node_names", ["gpu-a", "gpu-b"]),
                                                     _set("engines.0.replicas", 1),
                                                     _set("engines.0.autoscaling", {"max_replicas": 4})),
     "engines[0].autoscaling.max_replicas", "4 replicas on pool whole of 2 nodes would share a ReadWriteOnce"),
    # Isolation levels (tenantry/plan/isolation.py): alpha calls big, small and alpha-support; beta small and
    # beta-legal; gamma big; the gateway falls back from big to small.
    ("adapter-isolation-calling-a-base-model", _set("tenants.1.isolation", "adapter"), "tenants[1].models",
     "may not call base model(s) small"),
    ("adapter-isolation-without-adapters", _set("tenants.2.isolation", "adapter"), "tenants[2].isolation",
     "only through its own adapters, and it lists none"),
    ("adapter-isolation-given-a-base-by-a-fallback", _chain(_set("tenants.1.isolation", "adapter"),
                                                             _set("tenants.1.models", []),
                                                             _set("gateway.fallbacks", [{"model": "small",
                                                                                         "to": ["big"]}])),
     "tenants[1].isolation", "fallbacks allow its key base model(s) big"),
    ("mig-isolation-on-whole-gpus", _set("tenants.2.isolation", "mig"), "tenants[2].isolation",
     "engine big runs on 4 whole GPU(s) in pool whole"),
    ("dedicated-replica-on-a-listed-engine", _set("tenants.2.isolation", "dedicated-replica"), "tenants[2].isolation",
     "engine big is reached by alpha too"),
    ("dedicated-replica-reached-through-a-fallback", _chain(_ALPHA_ON_BIG_ONLY, _set("tenants.1.isolation",
                                                                                  "dedicated-replica")),
     "tenants[1].isolation", "engine small is reached by alpha, gamma too"),
    ("dedicated-node-on-a-pool-with-another-engine", _chain(_ALPHA_ON_BIG_ONLY, _set("gateway.fallbacks", []),
                                                            _set("engines.2", _SMALLER_ON_THE_SLICED_POOL),
                                                            _set("tenants.2.models", ["big", "smaller"]),
                                                            _set("tenants.1.isolation", "dedicated-node")),
     "tenants[1].isolation", "pool sliced for beta alone: it also runs engine(s) smaller"),
]


@pytest.mark.parametrize(("mutate", "path", "words"), [c[1:] for c in NOT_FITTING], ids=[c[0] for c in NOT_FITTING])
def test_spec_that_does_not_fit_is_refused_with_path_and_reason(mutate, path, words):
    result = plan(load_spec_text(to_yaml(mutate(base_spec()))), "test")
    assert not result.fits
    matching = [f for f in result.refusals if f.path == path]
    assert matching, f"no refusal at {path}; got {[str(f) for f in result.refusals]}"
    assert any(words in f.message for f in matching), [str(f) for f in matching]


def test_base_spec_fits_so_each_case_tests_one_change():
    result = plan(load_spec_text(to_yaml(base_spec())), "test")
    assert result.fits, result.refusals
    assert not result.warnings, result.warnings
