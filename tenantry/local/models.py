"""The local stack's models and adapters, built from the catalog's
architecture and the plan's adapters, cached under the model cache and
rebuilt only when their recipe changes."""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from tenantry.catalog.models import catalog_model
from tenantry.local.layout import VLLM_VENV
from tenantry.plan.model import EnginePlan

BUILDER = Path(__file__).resolve().parent / "build_model.py"
SEED = 20261129


class LocalModelError(Exception):
    pass


@dataclass(frozen=True)
class BuiltModel:
    engine: str
    model_dir: Path
    adapter_dir: Path


def _digest(data: object) -> str:
    source = BUILDER.read_bytes()
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode() + source).hexdigest()[:12]


def job_for(engine: EnginePlan, cache: Path) -> dict:
    """The builder's job for an engine whose source is local:// (a catalog model
    tenantry builds). The folder name carries a digest of the recipe, the
    builder's code included, so a changed recipe builds anew."""
    entry = catalog_model(engine.model)
    if entry is None or not engine.source.startswith("local://"):
        raise LocalModelError(f"engine {engine.name}: the local stack builds only the catalog's local models "
                              f"(tenantry-tiny, tenantry-micro), not {engine.model} from {engine.source}")
    architecture = asdict(entry.architecture)
    adapters = [
        {"name": a.name, "rank": a.rank, "target_modules": sorted(a.target_modules), "seed": SEED + i + 1}
        for i, a in enumerate(engine.lora.adapters)
    ]
    recipe = {"model": engine.model, "revision": engine.revision, "architecture": architecture, "adapters": adapters}
    folder = cache / f"{engine.model}-{_digest(recipe)}"
    return {
        "architecture": architecture,
        "seed": SEED,
        "model_dir": str(folder / "model"),
        "adapters": [{**a, "dir": str(folder / "adapters" / a["name"])} for a in adapters],
    }


def ensure_built(engine: EnginePlan, cache: Path) -> BuiltModel:
    job = job_for(engine, cache)
    model_dir = Path(job["model_dir"])
    built = BuiltModel(engine.name, model_dir, model_dir.parent / "adapters")
    if (model_dir / "tenantry-recipe.json").exists():
        return built
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        raise LocalModelError(f"the engines' environment is missing ({VLLM_VENV}); run `make local` to install it")
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    # Two stacks starting at once share the cache (the tests start theirs side by side): one builds, the other waits.
    with (model_dir.parent / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (model_dir / "tenantry-recipe.json").exists():
            return built
        job_file = model_dir.parent / "job.json"
        job_file.write_text(json.dumps(job, indent=2), encoding="utf-8")
        result = subprocess.run([str(python), str(BUILDER), str(job_file)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalModelError(f"building {engine.model} failed:\n{result.stderr[-2000:]}")
    return built
