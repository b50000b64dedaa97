"""Refusals and warnings collected while planning, each with the path of the field to change."""

from __future__ import annotations

from dataclasses import dataclass, field

from tenantry.findings import Finding


@dataclass
class Notes:
    refusals: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    def refuse(self, path: str, message: str) -> None:
        self.refusals.append(Finding(path=path, message=message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(Finding(path=path, message=message))

    def about_engine(self, index: int, name: str) -> EngineNotes:
        return EngineNotes(notes=self, path=f"engines[{index}]", who=f"engine {name}")


@dataclass(frozen=True, kw_only=True)
class EngineNotes:
    """Notes about one engine: paths under engines[i], messages ending with the engine's name."""

    notes: Notes
    path: str
    who: str

    def at(self, key: str | None) -> str:
        return f"{self.path}.{key}" if key else self.path

    def refuse(self, key: str | None, message: str) -> None:
        self.notes.refuse(self.at(key), f"{message} ({self.who})")

    def warn(self, key: str | None, message: str) -> None:
        self.notes.warn(self.at(key), f"{message} ({self.who})")
