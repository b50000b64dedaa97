"""A small valid spec to mutate in tests: a whole-GPU pool, a MIG pool, an
engine with adapters on each, and one tenant per tier."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

LLAMA_8B_REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"

# Parts of the base spec; base_spec() hands out a deep copy, so tests may mutate what they get.
_CLUSTER = {
    "environment": "eks",  # platform.cloud_identity is an AWS role: IRSA is EKS's
    "kubernetes_version": "1.35",
    "node_pools": [
        {"name": "whole", "gpu": "H100-80GB-SXM", "gpus_per_node": 8, "nodes": 1, "gpu_hour_price_usd": 2.5,
         "node_names": ["gpu-whole-0"]},
        {"name": "sliced", "gpu": "A100-80GB", "gpus_per_node": 4, "nodes": 1, "gpu_hour_price_usd": 1.8,
         "mig_layout": ["3g.40gb", "2g.20gb", "2g.20gb"]},
    ],
}

_ENGINES = [
    {
        "name": "big",
        "model": "llama-3.1-70b",
        "weights": "fp8",
        "max_context": 8192,
        "placement": {"pool": "whole", "tensor_parallel": 4},
        "replicas": 2,
    },
    {
        "name": "small",
        "model": "llama-3.1-8b",
        "max_context": 4096,
        "placement": {"pool": "sliced", "mig_profile": "3g.40gb"},
        "replicas": 2,
        "adapters": [
            {"name": "alpha-support", "base_model": "llama-3.1-8b", "base_revision": LLAMA_8B_REVISION,
             "rank": 16, "target_modules": ["q_proj", "v_proj"], "source": "s3://adapters/alpha/support",
             "tenant": "alpha"},
            {"name": "beta-legal", "base_model": "llama-3.1-8b", "base_revision": LLAMA_8B_REVISION,
             "rank": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
             "source": "s3://adapters/beta/legal", "tenant": "beta"},
        ],
    },
]

_TENANTS = [
    {
        "name": "alpha", "tier": "guaranteed", "models": ["big", "small"], "adapters": ["alpha-support"],
        "tpm": 50000, "rpm": 500, "max_concurrency": 20, "budget": {"usd": 500, "window": "30d"},
        "slo": {"ttft_p95_ms": 800, "itl_p95_ms": 60, "max_error_rate": 0.01},
        "typical": {"prompt_tokens": 1000, "output_tokens": 200},
        "traffic": [{"target": "big", "share": 0.5}, {"target": "small", "share": 0.25},
                    {"target": "alpha-support", "share": 0.25}],
    },
    {
        "name": "beta", "tier": "best-effort", "models": ["small"], "adapters": ["beta-legal"],
        "tpm": 30000, "rpm": 300, "max_concurrency": 10, "budget": {"usd": 200, "window": "1mo"},
        "cache": {"isolation": "shared", "group": "internal"},
        "slo": {"ttft_p95_ms": 2000, "itl_p95_ms": 100, "max_error_rate": 0.05},
    },
    {
        "name": "gamma", "tier": "spot", "models": ["big"],
        "tpm": 20000, "rpm": 200, "max_concurrency": 10, "budget": {"usd": 100, "window": "7d"},
        "cache": {"isolation": "none"},
        "slo": {"ttft_p95_ms": 10000, "itl_p95_ms": 300, "max_error_rate": 0.2},
    },
]


def base_spec() -> dict[str, Any]:
    return copy.deepcopy(
        {
            "description": "test stack",
            "cluster": _CLUSTER,
            "engines": _ENGINES,
            "tenants": _TENANTS,
            "gateway": {"replicas": 2, "fallbacks": [{"model": "big", "to": ["small"]}]},
            "platform": {
                "postgres": {"backup_destination": "s3://tenantry-test/postgres"},
                "runbook_base_url": "https://runbooks.example.com/tenantry",
                "cloud_identity": {"provider": "aws", "aws_role_arn": "arn:aws:iam::111122223333:role/tenantry-test"},
            },
        }
    )


def to_yaml(spec: Any) -> str:
    return yaml.safe_dump(spec, sort_keys=False)


Mutation = Callable[[dict[str, Any]], dict[str, Any]]


def set_field(path: str, value: Any) -> Mutation:
    """A mutation setting one field; path like 'tenants.0.tpm'. The index one past a list's end appends."""

    def mutate(spec: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.isdigit() and int(last) == len(node):
            node.append(value)
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
        return spec

    return mutate


def delete_field(path: str) -> Mutation:
    def mutate(spec: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[int(last) if last.isdigit() else last]
        return spec

    return mutate


def chain(*mutations: Mutation) -> Mutation:
    def mutate(spec: dict[str, Any]) -> dict[str, Any]:
        for m in mutations:
            spec = m(spec)
        return spec

    return mutate
