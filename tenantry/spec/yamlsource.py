"""Reading a spec file: YAML in, plain data plus a way back to each field's line.

Safe loading only. Duplicate keys are refused (PyYAML would silently keep the
last one, and a platform spec must not lose a tenant's quota that way), keys
must be text, and alias bombs are refused before they expand.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml

from tenantry.findings import Finding, Loc, file_finding, path_str

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"

MAX_EXPANDED_NODES = 200_000
"""Far above any real platform's spec, so it only refuses alias bombs, before they are
expanded into Python objects (docs/decisions.md: YAML node limit)."""


class YamlProblem(Exception):
    def __init__(self, finding: Finding):
        self.finding = finding
        super().__init__(str(finding))


@dataclass(frozen=True)
class YamlDocument:
    data: Any
    root: yaml.Node

    def line(self, loc: Loc) -> int | None:
        """1-based line of the deepest part of `loc` found in the document
        (the key's line for a mapping entry). Walked on demand: only errors need it."""
        node, line = self.root, self.root.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                entry = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
                if entry is None:
                    break
                line, node = entry[0].start_mark.line + 1, entry[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line


def _path_to(root: yaml.Node, target: yaml.Node) -> Loc:
    """Where `target` sits under `root`; for naming a bad key found while constructing."""
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, loc = stack.pop()
        if node is target:
            return loc
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [(v, (*loc, k.value)) for k, v in node.value if isinstance(k, yaml.ScalarNode)]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, (*loc, i)) for i, item in enumerate(node.value)]
    return ()


# libyaml's parser (shipped in PyYAML's wheels), because large specs load several times faster
# with it and both give the same nodes and marks (docs/decisions.md: Fast loading of large specs).
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SpecLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                continue
            if key_node.tag != _STR_TAG or not isinstance(key_node, yaml.ScalarNode):
                kind = key_node.tag.rsplit(":", 1)[-1]
                raise _BadKey(node, f"key {key_node.value!r} must be text (YAML read it as {kind}); quote it", line)
            if key_node.value in seen:
                raise _BadKey(
                    node, f"key '{key_node.value}' appears twice (lines {seen[key_node.value]} and {line}); keep one", line
                )
            seen[key_node.value] = line
        return super().construct_mapping(node, deep=deep)


class _BadKey(Exception):
    def __init__(self, mapping: yaml.MappingNode, message: str, line: int):
        self.mapping, self.message, self.line = mapping, message, line


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Node count once aliases are expanded, computed once per distinct node."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = 1  # a cycle counts once; construction refuses it later
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, memo) for item in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


@contextmanager
def collector_paused() -> Iterator[None]:
    """Building a large spec's objects triggers the cyclic garbage collector over and
    over, each pass walking every live node, so loading would grow faster than the
    spec. Loading creates no garbage cycles, so pause it and restore its state
    (docs/decisions.md: Fast loading of large specs)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def parse_yaml(text: str) -> YamlDocument:
    """Parse one YAML document; raise YamlProblem (with the line) on any error."""
    try:
        with collector_paused():
            return _parse(text)
    except RecursionError:
        raise YamlProblem(file_finding("the document is nested too deeply to be a spec")) from None


def _parse(text: str) -> YamlDocument:
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise YamlProblem(file_finding("the file is empty; a spec needs at least cluster, engines and tenants"))
        # Only a document with aliases can expand beyond its text.
        if "*" in text and _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise YamlProblem(
                file_finding(f"the document expands to more than {MAX_EXPANDED_NODES:,} values; "
                             "is an alias (*name) repeated many times?")
            )
        try:
            data = loader.construct_document(node)
        except _BadKey as bad:
            where = path_str(_path_to(node, bad.mapping))
            raise YamlProblem(Finding(path=where, message=bad.message, line=bad.line)) from None
        return YamlDocument(data, node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        line = mark.line + 1 if mark else None
        raise YamlProblem(file_finding(f"YAML syntax error: {problem}{context}", line=line)) from None
    except yaml.YAMLError as exc:  # not marked: e.g. an unknown tag
        raise YamlProblem(file_finding(f"YAML error: {exc}")) from None
    finally:
        loader.dispose()
