"""The repository's standing promises: documented, pinned, one test command."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

from tenantry import docs
from tenantry.plan import model

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PLATFORM = (ROOT / "docs" / "platform.md").read_text()


def test_the_spec_reference_in_the_platform_doc_is_generated_from_the_schema():
    assert docs.PAGE == ROOT / "docs" / "platform.md"
    assert docs.START in PLATFORM and docs.END in PLATFORM
    assert docs.rewritten(PLATFORM) == PLATFORM, "run `make docs`"


def test_the_platform_doc_documents_every_plan_key():
    section = PLATFORM.split("<!-- plan-keys:start -->")[1].split("<!-- plan-keys:end -->")[0]
    documented = set(re.findall(r"`([a-z_0-9]+)(?:\[\])?`", section))
    missing = {
        f"{cls.__name__}.{field.name}"
        for cls in vars(model).values()
        if dataclasses.is_dataclass(cls) and isinstance(cls, type)
        for field in dataclasses.fields(cls)
        if field.name not in documented
    }
    assert not missing, f"docs/platform.md's plan keys miss {sorted(missing)}"
    assert "fits" in documented


def test_readme_shows_the_two_commands_and_ci_runs_exactly_the_test_one():
    assert "make local" in README and "make test" in README
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#") and not line.startswith("set ") and not line.startswith("cd ")]
    assert commands == ["make test"]


def test_every_python_dependency_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requirements = list(project["project"]["dependencies"]) + list(project["build-system"]["requires"])
    for extra in project["project"]["optional-dependencies"].values():
        requirements += extra
    unpinned = [r for r in requirements if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==([0-9]+!)?[0-9][0-9A-Za-z.\-]*", r.split(";")[0].strip())]
    assert not unpinned, unpinned
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    assert all("==" in line for line in lock if line and not line.startswith("#"))


def test_generated_things_are_ignored():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for path in (".venv/", ".local/", "__pycache__/", ".hypothesis/", "rendered/"):
        assert path in ignored


def test_the_spec_reference_has_a_section_for_every_model_a_stack_file_can_hold():
    import typing

    from pydantic import BaseModel

    from tenantry.spec import schema

    def models_in(annotation) -> set[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return {annotation}
        return {m for arg in typing.get_args(annotation) for m in models_in(arg)}

    reachable, todo = set(), [schema.Spec]
    while todo:
        current = todo.pop()
        if current not in reachable:
            reachable.add(current)
            todo += [m for field in current.model_fields.values() for m in models_in(field.annotation)]
    listed = {model for _, model in docs.SECTIONS}
    assert reachable - listed == set(), "add them to tenantry/docs.py's SECTIONS, then `make docs`"
