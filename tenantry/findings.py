"""What the spec loader and the planner report: a field path and a reason."""

from __future__ import annotations

from dataclasses import dataclass

Loc = tuple[str | int, ...]


def path_str(loc: Loc) -> str:
    """('tenants', 2, 'tpm') -> 'tenants[2].tpm'"""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True, kw_only=True)
class Finding:
    path: str
    """Where in the spec, e.g. `tenants[2].tpm`; empty for the whole file."""
    message: str
    line: int | None = None
    """Line in the YAML file, when the path can be traced to one."""

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.path}: {self.message}" if self.path else f"{where}{self.message}"


def file_finding(message: str, line: int | None = None) -> Finding:
    """A finding about the whole file rather than one field."""
    return Finding(path="", message=message, line=line)


class SpecError(Exception):
    """The spec is invalid; `findings` lists every problem found."""

    def __init__(self, source: str, findings: list[Finding]):
        self.source = source
        self.findings = tuple(findings)
        self.headline = f"invalid spec {source}: {len(self.findings)} problem(s)"
        super().__init__(f"{source}: " + "; ".join(str(f) for f in self.findings))


class PlanRefused(Exception):
    """A valid spec whose plan does not fit; raised for consumers (deploy,
    local) that must not act on such a plan."""

    def __init__(self, stack: str, findings: tuple[Finding, ...]):
        self.stack = stack
        self.findings = findings
        self.headline = f"stack {stack} does not fit: {len(findings)} reason(s)"
        super().__init__(f"stack {stack} does not fit: " + "; ".join(str(f) for f in findings))
