"""Which labels an expression's series carry, and every use of a label they lack.

A selector matching a label its series never carry selects nothing (`{reason="x"}` on
a family without `reason`), a `by (label)` the input lacks groups everything into one
series with that label empty, a join `on (label)` that one side lacks pairs the wrong
series, and an alert whose summary reads `{{ $labels.engine }}` from a result without
`engine` pages with a blank. Prometheus accepts all of them. This module follows each
series' labels through an expression, as Prometheus's engine builds its results
(promql/engine.go: aggregation keeps its grouping labels; a one-to-one match `on`
keeps only the matching labels, `ignoring` drops them, group_left adds the one side's
extra labels; `and`/`unless` keep the left side's series, `or` both; label_replace adds
its destination; histogram_quantile drops `le`), from the labels each family carries
(tenantry/monitoring/metric_labels.py) and each recording rule's result.

The expression is parsed by promql_parser (Prometheus's grammar); the label sets are
the one thing worked out here."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import promql_parser as promql

from tenantry.monitoring import metrics
from tenantry.monitoring.metric_labels import stored_labels

Labels = frozenset[str]
_KEEP_LABELS = {"topk", "bottomk", "limitk", "limit_ratio"}
_NO_VECTOR = {"time", "scalar", "pi"}
_SET_OPS = {"and", "unless", "or"}
TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


@dataclass
class LabelFlow:
    """Labels of the recording rules seen so far (their names are series too), and the problems found."""
    recorded: dict[str, Labels] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def labels_of(self, name: str) -> Labels | None:
        if name in self.recorded:
            return self.recorded[name]
        family = metrics.family(name)
        if family is None:
            return None  # an unknown name is metrics.unknown_metrics' finding
        return stored_labels(family) | ({"le"} if name.endswith("_bucket") else set())

    def result(self, expr: str, where: str) -> Labels | None:
        """The labels of an expression's result (None for a scalar), noting each label it uses that is absent."""
        self._where = where
        return self._visit(promql.parse(expr))

    def templates(self, used: set[str], result: Labels | None, where: str) -> None:
        """Note each `$labels.x` an alert's templates read from a result without x: it renders blank."""
        self._where = where
        self._missing(used, result, "its annotations read $labels.")

    def _missing(self, used: Iterable[str], available: Labels | None, how: str) -> None:
        lacking = sorted(set(used) - (available or frozenset()))
        if available is not None and lacking:
            self.problems.append(f"{self._where}: {how} {lacking}, which its series lack (they carry "
                                 f"{sorted(available)})")

    def _visit(self, node) -> Labels | None:
        if isinstance(node, promql.MatrixSelector):
            return self._selector(node.vector_selector)
        if isinstance(node, promql.VectorSelector):
            return self._selector(node)
        if isinstance(node, (promql.ParenExpr, promql.UnaryExpr, promql.SubqueryExpr)):
            return self._visit(node.expr)
        if isinstance(node, promql.AggregateExpr):
            return self._aggregate(node)
        if isinstance(node, promql.BinaryExpr):
            return self._binary(node)
        if isinstance(node, promql.Call):
            return self._call(node)
        return None  # number and string literals

    def _selector(self, node) -> Labels | None:
        available = self.labels_of(node.name)
        needed = [m.name for m in node.matchers.matchers if m.name != "__name__" and not _matches_empty(m)]
        self._missing(needed, available, f"{node.name} is selected by")
        return available

    def _aggregate(self, node) -> Labels | None:
        inner = self._visit(node.expr)
        op = str(node.op).lower()
        modifier = node.modifier
        grouping = set(modifier.labels) if modifier is not None else set()
        without = modifier is not None and "without" in str(modifier.type).lower()
        if grouping and not without:
            self._missing(grouping, inner, f"{op} groups by")
        if op in _KEEP_LABELS or inner is None:
            return inner
        if without:
            return inner - grouping
        return frozenset(grouping) | ({str(node.param.val)} if op == "count_values" else set())

    def _binary(self, node) -> Labels | None:
        left, right = self._visit(node.lhs), self._visit(node.rhs)
        if left is None or right is None:
            return left if right is None else right
        op = str(node.op).lower()
        modifier = node.modifier
        matching = modifier.matching if modifier is not None else None
        on = matching is not None and str(matching.type).endswith("Include")  # on (...); Exclude is ignoring
        matched = set(matching.labels) if matching is not None else set()
        if on:
            self._missing(matched, left, f"`{op} on` joins by")
            self._missing(matched, right, f"`{op} on` joins by")
        if op in _SET_OPS:
            return left | right if op == "or" else left
        card = str(modifier.card).rsplit(".", 1)[-1] if modifier is not None else "OneToOne"
        included = set(modifier.group_labels or ()) if modifier is not None else set()
        if card == "ManyToOne":
            self._missing(included, right, "group_left copies")
            return left | included
        if card == "OneToMany":
            self._missing(included, left, "group_right copies")
            return right | included
        return frozenset(matched) if on else left - matched

    def _call(self, node) -> Labels | None:
        name = node.func.name
        args = list(node.args)
        if name in _NO_VECTOR:
            return None
        if name == "vector":
            return frozenset()
        if name in ("absent", "absent_over_time"):
            selector = args[0].vector_selector if isinstance(args[0], promql.MatrixSelector) else args[0]
            self._visit(args[0])
            return frozenset(m.name for m in getattr(selector, "matchers", promql.Matchers([])).matchers
                             if str(m.op) == "MatchOp.Equal" and m.name != "__name__")
        vectors = [self._visit(a) for a in args if not isinstance(a, (promql.StringLiteral, promql.NumberLiteral))]
        inner = next((v for v in vectors if v is not None), None)
        if name == "histogram_quantile":
            self._missing({"le"}, inner, "histogram_quantile reads")
            return None if inner is None else inner - {"le"}
        if name in ("label_replace", "label_join"):
            strings = [a.val for a in args if isinstance(a, promql.StringLiteral)]
            sources = strings[2:3] if name == "label_replace" else strings[2:]
            self._missing([s for s in sources if s], inner, f"{name} reads")
            return None if inner is None else inner | {strings[0]}
        return inner


def _matches_empty(matcher) -> bool:
    """Whether a matcher also selects series without its label (Prometheus treats a missing label as "")."""
    op = str(matcher.op).rsplit(".", 1)[-1].lower()
    value = matcher.value
    if op == "equal":
        return value == ""
    if op == "notequal":
        return value != ""
    fullmatch = re.fullmatch(value, "") is not None
    return fullmatch if op == "re" else not fullmatch


def rule_problems(rules: list[dict], flow: LabelFlow | None = None) -> list[str]:
    """Every label a list of rules (in evaluation order) uses that its series lack, recording rules'
    results included, and every `$labels.x` an alert's annotations or labels template from a result without x.
    `flow` keeps the recording rules' labels for expressions checked after (a dashboard's queries)."""
    flow = flow if flow is not None else LabelFlow()
    for rule in rules:
        name = rule.get("record") or rule["alert"]
        result = flow.result(rule["expr"], name)
        if "record" in rule:
            labels = (result or frozenset()) | set(rule.get("labels", {}))
            flow.recorded[name] = flow.recorded.get(name, frozenset()) | labels
            continue
        templates = [*rule.get("annotations", {}).values(), *rule.get("labels", {}).values()]
        used = {label for text in templates for label in TEMPLATE_LABEL.findall(text)}
        flow.templates(used, result, name)
    return flow.problems
