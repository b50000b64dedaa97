"""Fetch Hugging Face repositories at their pinned revisions into a cache claim.

Runs inside the vLLM image (it has huggingface_hub), shipped to the populate
Job in a ConfigMap, so it imports nothing of tenantry:

    python3 hub_fetch.py items.json

items.json lists {"repo", "revision", "destination", "whole"}. An adapter is
fetched whole; a model only in the files vLLM reads, so that a repository's
second copy of the weights (`original/*.pth`, Mistral's consolidated file
beside the sharded one) neither fills the claim nor doubles the download
(docs/decisions.md: Weights live in a cache claim filled once).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Callable

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt", ".onnx")
SAFETENSORS_INDEX = "model.safetensors.index.json"


def model_files(files: list[str], read_index: Callable[[], dict]) -> list[str]:
    """The files vLLM's default loader reads from a local directory: the Mistral format when
    consolidated*.safetensors exist, else the files the safetensors index names, else every
    .safetensors file; with every top-level file that holds no weights (config, tokenizer)."""
    top = [f for f in files if "/" not in f]
    consolidated = fnmatch.filter(top, "consolidated*.safetensors")
    if consolidated:
        weights = consolidated
    elif SAFETENSORS_INDEX in top:
        weights = sorted(set(read_index()["weight_map"].values()))
    else:
        weights = fnmatch.filter(top, "*.safetensors")
    return sorted(weights) + [f for f in top if not f.endswith(WEIGHT_SUFFIXES)]


def fetch(item: dict) -> None:
    from huggingface_hub import hf_hub_download, list_repo_files, snapshot_download

    repo, revision = item["repo"], item["revision"]
    allow = None
    if not item["whole"]:
        def read_index() -> dict:
            with open(hf_hub_download(repo, SAFETENSORS_INDEX, revision=revision), encoding="utf-8") as index:
                return json.load(index)

        allow = model_files(list_repo_files(repo, revision=revision), read_index)
    snapshot_download(repo_id=repo, revision=revision, local_dir=item["destination"], allow_patterns=allow)


def main(path: str) -> None:
    with open(path, encoding="utf-8") as items:
        for item in json.load(items):
            fetch(item)


if __name__ == "__main__":
    main(sys.argv[1])
