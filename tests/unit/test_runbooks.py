"""The runbooks stay true to the alerts and to what the platform deploys: one
runbook per alert the rules define (and none for an alert that does not
exist), each with the sections on-call reads at 3 a.m.; docs/on-call.md links
every runbook and procedure; and every name a runbook's kubectl commands use
(namespace, Deployment, Service, ConfigMap, Secret, CronJob, node, label)
exists in the manifests the Pulumi program renders for
stacks/h100x8-shared-70b.yaml, placeholders filled in with that stack's values."""

from __future__ import annotations

import functools

import re
from pathlib import Path
from typing import Iterator

import pytest

from tenantry.monitoring import rules
from tenantry.monitoring.metrics import UnknownMetric, unknown_metrics
from tenantry.stacks import plan_stack
from tests.unit.runbook_commands import (
    EXTERNAL,
    Rendered,
    code_blocks,
    commands,
    merged,
    problems_in,
    references,
    rendered_stack,
)

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "runbooks"
PROCEDURES = RUNBOOKS / "procedures"
ON_CALL = ROOT / "docs" / "on-call.md"
STACK = "h100x8-shared-70b"
MIG_STACK = "h100-mig-mixed"
MIG_PAGES = {"MigConfigFailed.md", "repartition-mig.md"}
WORKLOAD_STACKS = ("h200-many-adapters", "h100x16-405b")
"""Engines of every workload kind: autoscaled (a ScaledObject) and across nodes (a LeaderWorkerSet)."""
WORKLOAD_PAGES = {"engine-failover.md", "drain-a-gpu-node.md", "InferenceGatewayDown.md", "EndpointPickerDown.md"}
"""Pages about engines of kinds `h100x8-shared-70b` has none of (autoscaled, LeaderWorkerSet, kv-aware): their
names may also come from the stacks that have them."""
SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation", "Escalation")
PROCEDURE_NAMES = {"onboard-a-tenant", "rotate-a-tenant-key", "change-a-quota", "budget-running-out",
                   "engine-failover", "drain-a-gpu-node", "repartition-mig", "restore-postgres"}
"""The procedures issue 14 asks for; more may be added."""


def _recorded_names() -> set[str]:
    return set(rules.RECORDS)


def _alert_names() -> set[str]:
    return {a.name for a in rules.ALERTS}


# ---------------------------------------------------------------------------------------------------------------
# The runbooks' shape

def _runbook_files() -> dict[str, Path]:
    return {p.stem: p for p in RUNBOOKS.glob("*.md") if p.name != "README.md"}


def _sections(text: str) -> dict[str, str]:
    """`## Heading` → its text, in order."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_alert_has_a_runbook_with_the_sections_on_call_needs():
    files = _runbook_files()
    problems = []
    for name in sorted(_alert_names()):
        path = files.get(name)
        if path is None:
            problems.append(f"{name}: no runbooks/{name}.md")
            continue
        text = path.read_text(encoding="utf-8")
        if text.splitlines()[0] != f"# {name}":
            problems.append(f"{name}: the first line is not '# {name}'")
        sections = _sections(text)
        if [s for s in sections if s in SECTIONS] != list(SECTIONS):
            problems.append(f"{name}: sections {list(sections)}, expected {list(SECTIONS)} in that order")
            continue
        meaning = [line for line in sections["Meaning"].strip().splitlines() if line.strip()]
        if not 1 <= len(meaning) <= 4:
            problems.append(f"{name}: Meaning has {len(meaning)} lines; two or three say what it means")
        if not code_blocks(sections["Diagnosis"]):
            problems.append(f"{name}: Diagnosis has no commands to copy")
        if not re.search(r"\bkubectl\b", sections["Diagnosis"]):
            problems.append(f"{name}: Diagnosis has no kubectl command")
    assert problems == []


def test_no_runbook_for_an_alert_that_does_not_exist():
    assert sorted(set(_runbook_files()) - _alert_names()) == []


def test_the_procedures_issue_14_asks_for_exist_withcommands():
    found = {p.stem: p.read_text(encoding="utf-8") for p in PROCEDURES.glob("*.md")}
    assert sorted(PROCEDURE_NAMES - set(found)) == []
    assert [n for n, text in sorted(found.items()) if not code_blocks(text)] == []


def _links(page: Path) -> set[Path]:
    text = page.read_text(encoding="utf-8")
    return {(page.parent / target.partition("#")[0]).resolve()
            for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text)}


def test_the_on_call_page_and_the_index_link_every_runbook_and_procedure():
    pages = {p.resolve() for p in [*_runbook_files().values(), *PROCEDURES.glob("*.md")]}
    for index in (ON_CALL, RUNBOOKS / "README.md"):
        missing = sorted(str(p.relative_to(ROOT)) for p in pages - _links(index))
        assert missing == [], f"{index.relative_to(ROOT)} does not link {missing}"


def test_the_on_call_table_gives_every_alert_its_severity_and_runbook():
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\| \[`?([A-Za-z]+)`?\]\(\.\./runbooks/\1\.md\) \| ([^|]+) \|", ON_CALL.read_text(encoding="utf-8"),
        flags=re.MULTILINE)}
    assert sorted(rows) == sorted(_alert_names())
    wrong = []
    for alert in rules.ALERTS:
        severities = {alert.severity} if isinstance(alert.severity, str) else set(alert.severity)
        if not all(f"`{s}`" in rows[alert.name] for s in severities):
            wrong.append(f"{alert.name}: the table says {rows[alert.name].strip()}, the rule {sorted(severities)}")
    assert wrong == []


# ---------------------------------------------------------------------------------------------------------------
# The names the commands use

PLACEHOLDER_ROW = re.compile(r"^\| ((?:`\$[A-Z_]+`(?:, )?)+) \|", re.MULTILINE)


def _documented_placeholders() -> set[str]:
    text = (RUNBOOKS / "README.md").read_text(encoding="utf-8")
    return {name for row in PLACEHOLDER_ROW.findall(text) for name in re.findall(r"`\$([A-Z_]+)`", row)}


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return rendered_stack(STACK)


def _pages() -> list[Path]:
    return [*sorted(RUNBOOKS.glob("*.md")), *sorted(PROCEDURES.glob("*.md")), ON_CALL]


def test_every_name_a_runbook_command_uses_exists_in_the_rendered_stack(rendered):
    used: set = set()
    problems = []
    counted = 0
    with_mig = merged(rendered, rendered_stack(MIG_STACK))
    every_kind = functools.reduce(merged, map(rendered_stack, WORKLOAD_STACKS), rendered)
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        counted += sum(1 for _ in references(text, page.name))
        against = with_mig if page.name in MIG_PAGES else every_kind if page.name in WORKLOAD_PAGES else rendered
        problems += problems_in(text, str(page.relative_to(ROOT)), against, used=used)
    assert problems == []
    assert counted >= 100, f"only {counted} names found in the runbooks' commands: is the parser still reading them?"
    assert sorted(set(EXTERNAL) - used) == [], "EXTERNAL entries no command uses"


def test_every_placeholder_a_command_uses_is_documented_or_set_on_the_page():
    documented = _documented_placeholders()
    assert {"NAMESPACE", "ENGINE", "TENANT", "POD"} <= documented
    undocumented = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        lines = list(commands(text))
        assigned = {m for line in lines for m in re.findall(r"(?:^|[\s;(])(?:export\s+)?([A-Z_][A-Z0-9_]*)=", line)}
        assigned |= {m for line in lines for m in re.findall(r"\bfor\s+([A-Z_][A-Z0-9_]*)\s+in\b", line)}
        for line in lines:
            for name in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)\}?", line):
                if name not in documented | assigned:
                    undocumented.append(f"{page.relative_to(ROOT)}: ${name} in `{line}`")
    assert undocumented == []


def test_the_check_finds_a_wrong_name_in_a_command(rendered):
    """The checker itself, on commands with one mistake each: a right command passes, each wrong one is named."""
    right = "```sh\nkubectl -n $NAMESPACE rollout restart deployment/tenantry-gateway\n" \
            "kubectl -n $NAMESPACE get pods -l tenantry.io/engine=$ENGINE\n```\n"
    assert problems_in(right, "right", rendered, external={}) == []
    wrong = {
        "kubectl -n $NAMESPACE rollout restart deployment/tenantry-gatewy": "Deployment tenantry-gatewy",
        "kubectl -n $NAMESPACE logs deploy/litellm": "Deployment litellm",
        "kubectl -n tenantry-system get deploy tenantry-redis": "Namespace tenantry-system",
        "kubectl -n $NAMESPACE get pods -l tenantry.io/engin=llama-70b": "label key tenantry.io/engin",
        "kubectl -n $NAMESPACE get pods -l tenantry.io/engine=llama-7b": "tenantry.io/engine=llama-7b",
        "kubectl -n $NAMESPACE create job --from=cronjob/tenantry-reconciler now": "CronJob tenantry-reconciler",
        "kubectl get configmap tenantry-gateway": "without -n",
        "kubectl -n $NAMESPACE get secret tenantry-master-key": "Secret tenantry-master-key",
        "kubectl -n $NAMESPACE port-forward svc/tenantry-postgres-ro 5432": "Service tenantry-postgres-ro",
        "kubectl label node $NODE nvidia.com/mig.confg=all-1g.10gb --overwrite": "label key nvidia.com/mig.confg",
        "kubectl cordon h100-node-9": "Node h100-node-9",
        "kubectl get nodes -L tenantry.io/poll": "label key tenantry.io/poll",
    }
    for command, named in wrong.items():
        found = problems_in(f"```sh\n{command}\n```\n", "wrong", rendered, external={})
        assert any(named in f for f in found), (command, found)


# ---------------------------------------------------------------------------------------------------------------
# The PromQL they run

def _queries(text: str) -> Iterator[str]:
    """The PromQL of every `promql "…"` and `--data-urlencode "query=…"` in the page's commands."""
    for line in commands(text):
        found = re.findall(r'\bpromql "(.*?)"(?=\s*(?:$|[|;&]))', line)
        found += re.findall(r'--data-urlencode "query=(.*?)"', line)
        # The helper's own definition passes its argument on: `query=$1`.
        yield from (q for q in found if not re.fullmatch(r"\$\d", q))


def query_problems(text: str, where: str, recorded: set[str]) -> list[str]:
    found = []
    for query in _queries(text):
        expr = re.sub(r"\$\{?[A-Z_]+\}?", "x", query)
        try:
            unknown = unknown_metrics(expr, recorded)
        except (UnknownMetric, ValueError) as error:
            found.append(f"{where}: {query}: {error}")
            continue
        if unknown:
            found.append(f"{where}: {query}: {sorted(unknown)} neither exported nor recorded")
    return found


def test_every_query_parses_and_reads_only_metrics_that_exist():
    recorded = _recorded_names()
    problems, counted = [], 0
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        counted += sum(1 for _ in _queries(text))
        problems += query_problems(text, str(page.relative_to(ROOT)), recorded)
    assert problems == []
    assert counted >= 100, f"only {counted} queries found: is the pattern still `promql \"…\"`?"


def test_the_query_check_finds_a_misspelt_metric():
    recorded = _recorded_names()
    assert query_problems('```sh\npromql "vllm:num_requests_waiting{model_name=\'$ENGINE\'}"\n```\n', "right",
                          recorded) == []
    for wrong in ("vllm:num_requests_waitng", "tenantry:tenant_slo_miss_ratio:rate7m",
                  "rate(tenantry_tenant_requests[5m])", "{__name__=~'litellm_redis_.*'}", "sum by (tenant ("):
        assert query_problems(f'```sh\npromql "{wrong}"\n```\n', "wrong", recorded), wrong
