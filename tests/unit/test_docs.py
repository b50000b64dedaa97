"""The documentation stays true to the code: its links resolve, the commands it
quotes exist with the options it gives them, and its lists are the code's."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from pathlib import Path

import pytest

from tenantry.cli import main
from tenantry.gate.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PLANNED = {"tenantry/configs/alerts.py", "benchmarks/out/"}
"""Paths the docs name on purpose that a clone does not have: an example of an
outlet still to be written, and a folder the benchmarks make (ignored by git)."""
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in listed if (ROOT / p).exists()]


def _prose(text: str) -> str:
    """The text without its code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def _help(*words: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stopped:
        main([*words, "--help"])
    assert stopped.value.code == 0, words
    return out.getvalue()


def test_the_readme_stays_short_and_points_to_every_doc():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    for doc in sorted(DOCS.glob("*.md")):
        assert f"(docs/{doc.name})" in readme, f"the README does not point to docs/{doc.name}"


def test_every_link_between_documents_resolves():
    broken = []
    for page in _markdown_files():
        for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert broken == []


def _quoted_commands() -> list[tuple[str, list[str]]]:
    """Every `tenantry ...` the README and docs/ quote: inline code and lines of
    code blocks that start with it, as their words up to a comment."""
    found = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
        snippets = [line for block in blocks for line in block.splitlines()]
        snippets += re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL))
        for snippet in snippets:
            words = snippet.split("#")[0].split()
            if words and words[0] in ("tenantry", ".venv/bin/tenantry") and len(words) > 1:
                found.append((page.name, words[1:]))
    return found


def _options(words: list[str]) -> list[str]:
    return [w.split("=")[0] for w in words if re.fullmatch(r"--?[a-z][a-z-]*(=\S*)?", w)]


def test_every_tenantry_command_the_docs_quote_exists_with_its_options():
    quoted = _quoted_commands()
    assert {words[0] for _, words in quoted} >= {"plan", "manifests", "gate", "local"}
    wrong = []
    for page, words in quoted:
        quoted_as = f"{page}: tenantry {' '.join(words)}"
        names = [[words[0]]]
        if words[0] == "local" and len(words) > 1 and words[1] != "ACTION" and not words[1].startswith("-"):
            names = [["local", action] for action in words[1].split("/")]
        for name in names:
            try:
                text = _help(*name)
            except (AssertionError, SystemExit):
                wrong.append(f"{quoted_as} (no command tenantry {' '.join(name)})")
                continue
            wrong += [f"{quoted_as} ({option} is not an option of tenantry {' '.join(name)})"
                      for option in _options(words) if not re.search(re.escape(option) + r"(?![\w-])", text)]
    assert wrong == []


def test_the_qa_page_describes_every_scenario_the_gate_has():
    qa = (DOCS / "qa.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z-]+)` \|", qa, flags=re.MULTILINE))
    assert rows >= set(SCENARIOS), f"docs/qa.md misses {sorted(set(SCENARIOS) - rows)}"


def _refusal_reasons() -> set[str]:
    """Every reason the plugin refuses for, read from its source: the admission
    decision's shed reasons, the X-Tenantry-Shed values and the caps' counter labels."""
    reasons: set[str] = set()
    for path in (ROOT / "tenantry" / "gateway").glob("tenant_policy*.py"):
        source = path.read_text(encoding="utf-8")
        reasons.update(re.findall(r'Decision\(\s*False,\s*"([a-z-]+)"', source))
        reasons.update(re.findall(r'\bshed="([a-z-]+)"', source))
        reasons.update(re.findall(r'REFUSED\.labels\([^)]*reason="([a-z_]+)"', source))
    return reasons


def test_the_on_call_page_explains_every_refusal_the_plugin_gives():
    reasons = _refusal_reasons()
    assert {"concurrency", "shared-slots", "saturated", "redis", "max_tokens"} <= reasons, \
        f"the plugin's refusals are no longer where this test reads them: found {sorted(reasons)}"
    on_call = (DOCS / "on-call.md").read_text(encoding="utf-8")
    assert [r for r in sorted(reasons) if f"`{r}`" not in on_call] == []
    assert "X-Tenantry-Shed" in on_call


def test_the_on_call_page_lists_every_metric_the_plugin_exports():
    names = {name for path in (ROOT / "tenantry" / "gateway").glob("tenant_policy*.py")
             for name in re.findall(r'"(tenantry_gateway_[a-z_]+)"', path.read_text(encoding="utf-8"))}
    assert len(names) >= 4, f"the plugin's metrics are no longer where this test reads them: found {sorted(names)}"
    on_call = (DOCS / "on-call.md").read_text(encoding="utf-8")
    assert [n for n in sorted(names) if f"`{n}`" not in on_call] == []


def test_every_path_the_docs_quote_exists():
    """Backticked paths into the repository, except placeholders and what a
    page names as still to be written."""
    missing = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for quoted in re.findall(r"`((?:tenantry|tests|benchmarks|policy|charts|stacks|scripts|docs|runbooks|ansible)/"
                                 r"[^`\s]*)`", text):
            path = quoted.split("::")[0]
            if not any(c in path for c in "<{*[") and not (ROOT / path).exists() and path not in PLANNED:
                missing.append(f"{page.name}: {quoted}")
    assert missing == []


def _cited_decisions() -> dict[str, set[str]]:
    """Every `docs/decisions.md: <Decision name>` citation, in code or docs, by name: where it is cited.
    A citation may wrap across comment or docstring lines; markers and indentation are folded away."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py", "*.md",
                             "*.yaml", "Makefile"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    cited: dict[str, set[str]] = {}
    for relative in listed:
        path = ROOT / relative
        if not path.exists() or relative == "docs/decisions.md":
            continue
        folded = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text(encoding="utf-8"))
        for name in re.findall(r"decisions\.md: ([^)`]+?)\)", folded):
            if name != "<Decision name>":
                cited.setdefault(name.strip(), set()).add(relative)
    return cited


def test_every_decision_the_code_or_docs_cite_exists():
    headings = set(re.findall(r"^## (.+?)\s*$", (DOCS / "decisions.md").read_text(encoding="utf-8"), re.MULTILINE))
    cited = _cited_decisions()
    assert len(cited) >= 10, "the citation scan found too little: is the pattern still `docs/decisions.md: Name`?"
    assert {name: sorted(where) for name, where in cited.items() if name not in headings} == {}


def test_no_decision_is_written_twice():
    headings = re.findall(r"^## (.+?)\s*$", (DOCS / "decisions.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert sorted({h for h in headings if headings.count(h) > 1}) == []
