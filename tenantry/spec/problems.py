"""What a cross-field check returns, and the wording shared by every check: close-match
suggestions, short listings of names, duplicate names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from tenantry.findings import Loc

Problem = tuple[Loc, str]


def suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def listing(names: Iterable[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:12])
    return shown + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def duplicates(names: list[str], loc: Loc, kind: str) -> list[Problem]:
    first: dict[str, int] = {}
    problems = []
    for i, name in enumerate(names):
        if name in first:
            problems.append(((*loc, i, "name"), f"{kind} name '{name}' is already used by {loc[-1]}[{first[name]}]"))
        else:
            first[name] = i
    return problems
