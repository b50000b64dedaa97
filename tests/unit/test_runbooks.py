"""The runbooks stay true to the alerts and to what the platform deploys: one
runbook per alert the rules define (and none for an alert that does not
exist), each with the sections on-call reads at 3 a.m.; docs/on-call.md links
every runbook and procedure; and every name a runbook's kubectl commands use
(namespace, Deployment, Service, ConfigMap, Secret, CronJob, node, label)
exists in the manifests the Pulumi program renders for
stacks/h100x8-shared-70b.yaml, placeholders filled in with that stack's values."""

from __future__ import annotations

import itertools
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from tenantry.manifests.offline import Secret, render
from tenantry.monitoring.metrics import UnknownMetric, unknown_metrics
from tenantry.stacks import plan_stack, stack_path

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "runbooks"
PROCEDURES = RUNBOOKS / "procedures"
ON_CALL = ROOT / "docs" / "on-call.md"
STACK = "h100x8-shared-70b"
MIG_STACK = "h100-mig-mixed"
MIG_PAGES = {"MigConfigFailed.md", "repartition-mig.md"}
"""Pages about carved pools: `h100x8-shared-70b` has none, so their names may also come from a stack
with one (the MIG manager's ConfigMap exists only there)."""
SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation", "Escalation")
PROCEDURE_NAMES = {"onboard-a-tenant", "rotate-a-tenant-key", "change-a-quota", "budget-running-out",
                   "engine-failover", "drain-a-gpu-node", "repartition-mig", "restore-postgres"}
"""The procedures issue 14 asks for; more may be added."""

# Until tenantry/monitoring/rules.py lands, the alert names of the issue-14 contract;
# replaced by the rules module's ALERTS table (see _alert_names).
CONTRACT_ALERTS = frozenset({
    "TenantTtftBudgetBurnFast", "TenantTtftBudgetBurnSlow", "TenantItlBudgetBurnFast", "TenantItlBudgetBurnSlow",
    "TenantErrorRateHigh", "TenantGuaranteedThrottled", "TenantBudgetSpent", "TenantBudgetExhaustionProjected",
    "EngineDown", "EngineQueueBacklog", "EngineKvCacheFull", "EnginePreemptionsRising", "EngineAdapterLoadFailed",
    "EngineTtftHigh", "GatewayReplicaDown", "GatewayOverheadHigh", "GatewayPolicyFailSafe", "PostgresDown",
    "PostgresSpendWritesFailing", "RedisDown", "ReconcilerJobFailed", "GpuXidError", "GpuEccErrors",
    "GpuTemperatureHigh", "GpuThrottled", "MigConfigFailed", "NodePoolGpusMissing",
})


CONTRACT_RECORDS = frozenset({
    *(f"tenantry:tenant_{m}_seconds:{q}_5m" for m in ("ttft", "itl") for q in ("p50", "p95")),
    *(f"tenantry:tenant_slo_miss_ratio:rate{w}" for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d")),
    "tenantry:tenant_goodput:rate5m", "tenantry:tenant_tokens:rate5m", "tenantry:tenant_spend_usd:rate1h",
    "tenantry:tenant_prefix_cache_reuse:ratio_rate1h", "tenantry:gateway_admissions:rate5m",
    "tenantry:tenant_error_ratio:rate10m", "tenantry:tenant_budget_spent:ratio",
    *(f"tenantry:tenant_objective:{o}" for o in ("ttft_seconds", "itl_seconds", "max_error_rate")),
})


def _recorded_names() -> set[str]:
    try:
        from tenantry.monitoring.rules import rule_groups
    except ImportError:
        return set(CONTRACT_RECORDS)
    return {r["record"] for g in rule_groups(plan_stack(STACK)) for r in g["rules"] if "record" in r}


def _alert_names() -> set[str]:
    try:
        from tenantry.monitoring import rules
    except ImportError:
        return set(CONTRACT_ALERTS)
    return {a.name for a in rules.ALERTS}


# ---------------------------------------------------------------------------------------------------------------
# The runbooks' shape

def _runbook_files() -> dict[str, Path]:
    return {p.stem: p for p in RUNBOOKS.glob("*.md") if p.name != "README.md"}


def _sections(text: str) -> dict[str, str]:
    """`## Heading` → its text, in order."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _code_blocks(text: str) -> list[str]:
    """Fenced blocks, also those indented under a list item (their indentation removed)."""
    return [textwrap.dedent(m.group(2)) for m in
            re.finditer(r"^( *)```[a-z]*\n(.*?)^\1```", text, flags=re.MULTILINE | re.DOTALL)]


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
        if not _code_blocks(sections["Diagnosis"]):
            problems.append(f"{name}: Diagnosis has no commands to copy")
        if not re.search(r"\bkubectl\b", sections["Diagnosis"]):
            problems.append(f"{name}: Diagnosis has no kubectl command")
    assert problems == []


def test_no_runbook_for_an_alert_that_does_not_exist():
    assert sorted(set(_runbook_files()) - _alert_names()) == []


def test_the_procedures_issue_14_asks_for_exist_with_commands():
    found = {p.stem: p.read_text(encoding="utf-8") for p in PROCEDURES.glob("*.md")}
    assert sorted(PROCEDURE_NAMES - set(found)) == []
    assert [n for n, text in sorted(found.items()) if not _code_blocks(text)] == []


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
    try:
        from tenantry.monitoring import rules
    except ImportError:
        return
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


KINDS = {
    "ns": "Namespace", "namespace": "Namespace", "namespaces": "Namespace",
    "deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
    "svc": "Service", "service": "Service", "services": "Service",
    "cm": "ConfigMap", "configmap": "ConfigMap", "configmaps": "ConfigMap",
    "secret": "Secret", "secrets": "Secret",
    "cj": "CronJob", "cronjob": "CronJob", "cronjobs": "CronJob",
    "job": "Job", "jobs": "Job",
    "node": "Node", "nodes": "Node", "no": "Node",
    "ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
    "pdb": "PodDisruptionBudget", "poddisruptionbudget": "PodDisruptionBudget",
    "hpa": "HorizontalPodAutoscaler", "horizontalpodautoscaler": "HorizontalPodAutoscaler",
    "pvc": "PersistentVolumeClaim", "persistentvolumeclaim": "PersistentVolumeClaim",
    "networkpolicy": "NetworkPolicy", "netpol": "NetworkPolicy",
    "resourcequota": "ResourceQuota", "quota": "ResourceQuota",
    "servicemonitor": "ServiceMonitor", "servicemonitors": "ServiceMonitor",
    "podmonitor": "PodMonitor", "podmonitors": "PodMonitor",
    "prometheusrule": "PrometheusRule", "prometheusrules": "PrometheusRule",
    "clusters.postgresql.cnpg.io": "Cluster", "cluster.postgresql.cnpg.io": "Cluster",
    "scheduledbackups.postgresql.cnpg.io": "ScheduledBackup", "scheduledbackup.postgresql.cnpg.io": "ScheduledBackup",
    "objectstores.barmancloud.cnpg.io": "ObjectStore", "objectstore.barmancloud.cnpg.io": "ObjectStore",
}
"""kubectl's resource words → the kinds whose names the test checks."""
UNCHECKED = {"po", "pod", "pods", "event", "events", "ev", "backups.postgresql.cnpg.io", "backup.postgresql.cnpg.io",
             "rs", "replicaset", "replicasets", "endpoints", "ep", "all", "lease", "leases"}
"""Resource words whose names are made at run time (pods, events, backups): not in any manifest."""
CLUSTER_SCOPED = {"Namespace", "Node"}
NAME_VERBS = {"get", "describe", "delete", "edit", "patch", "label", "annotate", "scale", "wait", "cordon",
              "uncordon", "drain", "rollout", "logs", "port-forward", "exec", "top", "set", "debug"}
"""Verbs whose arguments name existing objects (`create` names a new one; its --from is checked)."""

EXTERNAL = {
    ("Service", "monitoring", "kube-prometheus-stack-alertmanager"): "kube-prometheus-stack's Alertmanager",
    ("Label", "", "nvidia.com/mig.config.state"): "the MIG manager writes the outcome of a relabel here",
    ("Label", "", "nvidia.com/gpu.product"): "GPU Feature Discovery labels every GPU node",
    ("Label", "", "app"): "the GPU Operator's daemonsets select their pods by app=<daemonset>",
    ("Label", "", "cnpg.io/instanceRole"): "CloudNativePG marks its primary instance",
    ("LabelValue", "", "app.kubernetes.io/name=cloudnative-pg"): "the CloudNativePG chart's operator pods",
}
"""Objects and label keys that charts and controllers make, which no rendered manifest holds;
each entry says who makes it. An entry no command uses is an error (it would hide a typo)."""


@dataclass(frozen=True)
class Ref:
    kind: str
    namespace: str
    name: str
    """A name, or for kind Label a label key, or for LabelValue `key=value`."""
    where: str
    command: str


def _words(line: str) -> list[str]:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|;&()")
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return line.split()


def _commands(text: str) -> Iterator[str]:
    """Each line of each fenced block, continuation lines joined, comments cut."""
    for block in _code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                yield line


def _kubectl_segments(line: str) -> Iterator[list[str]]:
    """The words of every kubectl invocation in a line, up to the next |, ;, &&, $(, ) or redirection."""
    words = _words(line)
    for i, word in enumerate(words):
        if word == "kubectl" or word.endswith("(kubectl"):
            segment = []
            for w in words[i + 1:]:
                if w in {"(", "$("} or w.startswith(("|", ";", "&", ")", ">", "<")) or re.match(r"\d>", w):
                    break
                segment.append(w)
            yield segment


def _selector_refs(selector: str) -> Iterator[tuple[str, str | None]]:
    for term in re.split(r",(?![^()]*\))", selector):
        term = term.strip().lstrip("!")
        match = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w./$-]*)", term)
        if match:
            yield match.group(1), match.group(3) if match.group(2) != "!=" else None
        else:
            key = re.match(r"[\w./-]+", term)
            if key:
                yield key.group(0), None


def references(text: str, where: str) -> Iterator[Ref]:
    """The names every kubectl command in `text` uses (before placeholders are filled in)."""
    for line in _commands(text):
        for words in _kubectl_segments(line):
            namespace, positional, flags = "", [], {}
            it = iter(range(len(words)))
            for i in it:
                w = words[i]
                if w == "--":
                    break
                value_flag = re.fullmatch(r"(-n|--namespace|-l|--selector|-L|--label-columns|-c|--container|-o"
                                          r"|--output|-f|--filename|--field-selector|--sort-by|--for|--timeout"
                                          r"|--tail|--since|--type|-p|--patch|--from|--replicas|--to-revision)", w)
                if value_flag and i + 1 < len(words):
                    flags.setdefault(w, []).append(words[i + 1])
                    next(it, None)
                elif w.startswith("--") and "=" in w:
                    flag, _, value = w.partition("=")
                    flags.setdefault(flag, []).append(value)
                elif not w.startswith("-"):
                    positional.append(w)
            namespace = (flags.get("-n") or flags.get("--namespace") or [""])[0]
            command = "kubectl " + " ".join(words)
            if namespace:
                yield Ref("Namespace", "", namespace, where, command)
            for selector in flags.get("-l", []) + flags.get("--selector", []):
                for key, value in _selector_refs(selector):
                    yield Ref("Label", "", key, where, command)
                    if value is not None:
                        yield Ref("LabelValue", "", f"{key}={value}", where, command)
            for columns in flags.get("-L", []) + flags.get("--label-columns", []):
                for key in columns.split(","):
                    yield Ref("Label", "", key, where, command)
            for key in re.findall(r"\.metadata\.labels\.((?:[\w-]|\\\.|/)+)", command):
                yield Ref("Label", "", key.replace("\\.", "."), where, command)
            for source in flags.get("--from", []):
                kind, _, name = source.partition("/")
                if kind in KINDS and name:
                    yield Ref(KINDS[kind], namespace, name, where, command)
            if not positional:
                continue
            verb, rest = positional[0], positional[1:]
            if verb == "cnpg" and len(rest) >= 2:
                yield Ref("Cluster", namespace, rest[1], where, command)
                continue
            if verb == "create" and len(rest) >= 2 and rest[0] in KINDS and not rest[1].startswith("-"):
                yield Ref("Created", namespace, f"{KINDS[rest[0]]}/{rest[1]}", where, command)
            if verb not in NAME_VERBS:
                continue
            if verb == "rollout" and rest:
                rest = rest[1:]
            if verb in {"cordon", "uncordon", "drain"}:
                yield from (Ref("Node", "", n, where, command) for n in rest)
                continue
            typed = [w for w in rest if "/" in w and w.split("/", 1)[0] in KINDS | dict.fromkeys(UNCHECKED)]
            for w in typed:
                kind, _, name = w.partition("/")
                if kind in KINDS:
                    yield Ref(KINDS[kind], namespace, name, where, command)
            if typed or not rest:
                if verb == "label" and typed:
                    yield from _label_args(rest, where, command)
                continue
            kind_word = rest[0]
            if kind_word in UNCHECKED or "," in kind_word:
                continue
            if kind_word not in KINDS:
                if verb in {"get", "describe", "delete", "edit", "patch", "label", "annotate", "scale", "wait"}:
                    yield Ref("UnknownKind", namespace, kind_word, where, command)
                continue
            kind = KINDS[kind_word]
            names = [w for w in rest[1:] if "=" not in w and not w.endswith("-")]
            yield from (Ref(kind, namespace, n, where, command) for n in names)
            if verb == "label":
                yield from _label_args(rest[1:], where, command)


def _label_args(words: list[str], where: str, command: str) -> Iterator[Ref]:
    for w in words:
        if "=" in w:
            yield Ref("Label", "", w.split("=", 1)[0], where, command)
        elif w.endswith("-") and "/" in w or w.endswith("-") and "." in w:
            yield Ref("Label", "", w[:-1], where, command)


@dataclass(frozen=True)
class Rendered:
    objects: set[tuple[str, str, str]]
    """(kind, namespace, name); namespace '' for cluster-scoped kinds."""
    label_keys: set[str]
    label_pairs: set[str]
    placeholders: dict[str, tuple[str, ...]]


def _label_maps(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            if key in {"labels", "matchLabels", "nodeSelector"} and isinstance(child, dict):
                yield child
            elif key == "matchExpressions" and isinstance(child, list):
                yield from ({e["key"]: None} for e in child if isinstance(e, dict) and "key" in e)
            elif key == "tolerations" and isinstance(child, list):
                yield from ({t["key"]: t.get("value")} for t in child if isinstance(t, dict) and "key" in t)
            yield from _label_maps(child)
    elif isinstance(value, list):
        for child in value:
            yield from _label_maps(child)


def _text(value: Any) -> str:
    if isinstance(value, Secret):
        return _text(value.value)
    if isinstance(value, dict):
        return " ".join(_text(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    return str(value)


def rendered_stack(stack: str) -> Rendered:
    plan = plan_stack(stack)
    manifests = render(stack_path(stack), stack).manifests()
    objects = {(m["kind"], "" if m["kind"] in CLUSTER_SCOPED else m["metadata"].get("namespace", ""),
                m["metadata"]["name"]) for m in manifests}
    # Services the rendered objects address by cluster DNS (the operators' and charts' own, e.g.
    # CloudNativePG's tenantry-postgres-rw, the chart's Prometheus) exist as surely as the ones rendered.
    objects |= {("Service", ns, name)
                for name, ns in re.findall(r"\b([a-z0-9-]+)\.([a-z0-9-]+)\.svc\b", _text(manifests))}
    maps = list(_label_maps(manifests))
    placeholders = {
        "NAMESPACE": (plan.platform.namespace,),
        "ENGINE": tuple(e.name for e in plan.engines),
        "TENANT": tuple(t.name for t in plan.tenants),
        "TIER": tuple(sorted({t.tier for t in plan.tenants})),
        "NODE": tuple(n for p in plan.pools for n in p.node_names or ()),
        "POOL": tuple(p.name for p in plan.pools),
    }
    return Rendered(objects, {k for m in maps for k in m},
                    {f"{k}={v}" for m in maps for k, v in m.items() if v is not None}, placeholders)


def _filled(ref: Ref, rendered: Rendered) -> Iterator[Ref] | None:
    """The reference once for each combination of its placeholders' values; None when it holds one
    only known at run time ($POD) and cannot be checked."""
    names = sorted(set(re.findall(r"\$\{?([A-Z_]+)\}?", ref.namespace + " " + ref.name)))
    if any(n not in rendered.placeholders for n in names):
        return None

    def fill(text: str, values: dict[str, str]) -> str:
        return re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: values[m.group(1)], text)

    combos = itertools.product(*(rendered.placeholders[n] for n in names))
    return (Ref(ref.kind, fill(ref.namespace, dict(zip(names, c))), fill(ref.name, dict(zip(names, c))),
                ref.where, ref.command) for c in combos)


def problems_in(text: str, where: str, rendered: Rendered, external: dict | None = None,
                used: set | None = None) -> list[str]:
    """Every name the commands in `text` use that the rendered stack does not have."""
    external = EXTERNAL if external is None else external
    refs = list(references(text, where))
    # What a page's own commands create (`kubectl create job NAME --from=...`) exists for its later commands.
    created = {(r.name.split("/", 1)[0], r.namespace, r.name.split("/", 1)[1])
               for ref in refs if ref.kind == "Created" for r in _filled(ref, rendered) or ()}
    rendered = Rendered(rendered.objects | created, rendered.label_keys, rendered.label_pairs, rendered.placeholders)
    found = []
    for ref in refs:
        if ref.kind == "Created":
            continue
        if ref.kind == "UnknownKind":
            found.append(f"{where}: `{ref.command}`: kubectl resource '{ref.name}' is not one this test knows")
            continue
        filled = _filled(ref, rendered)
        for one in filled or ():
            problem = _check(one, rendered, external, used)
            if problem:
                found.append(f"{where}: `{ref.command}`: {problem}")
    return found


def _check(ref: Ref, rendered: Rendered, external: dict, used: set | None) -> str | None:
    def known(key: tuple[str, str, str]) -> bool:
        if key in external:
            if used is not None:
                used.add(key)
            return True
        return False

    if ref.kind == "Label":
        if ref.name in rendered.label_keys or known(("Label", "", ref.name)):
            return None
        return f"label key {ref.name} is on no rendered object"
    if ref.kind == "LabelValue":
        key = ref.name.split("=", 1)[0]
        if key not in rendered.label_keys or ref.name in rendered.label_pairs or known(("LabelValue", "", ref.name)):
            return None
        return f"no rendered object carries the label {ref.name}"
    if ref.kind in CLUSTER_SCOPED:
        key = (ref.kind, "", ref.name)
        return None if key in rendered.objects or known(key) else f"no {ref.kind} {ref.name} is rendered"
    if not ref.namespace:
        return f"{ref.kind} {ref.name} without -n: kubectl would look in the default namespace"
    key = (ref.kind, ref.namespace, ref.name)
    if key in rendered.objects or known(key):
        return None
    return f"no {ref.kind} {ref.name} in namespace {ref.namespace} is rendered"


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return rendered_stack(STACK)


def merged(a: Rendered, b: Rendered) -> Rendered:
    return Rendered(a.objects | b.objects, a.label_keys | b.label_keys, a.label_pairs | b.label_pairs,
                    {k: tuple(dict.fromkeys(a.placeholders.get(k, ()) + b.placeholders.get(k, ())))
                     for k in a.placeholders.keys() | b.placeholders.keys()})


def _pages() -> list[Path]:
    return [*sorted(RUNBOOKS.glob("*.md")), *sorted(PROCEDURES.glob("*.md")), ON_CALL]


def test_every_name_a_runbook_command_uses_exists_in_the_rendered_stack(rendered):
    used: set = set()
    problems = []
    counted = 0
    with_mig = merged(rendered, rendered_stack(MIG_STACK))
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        counted += sum(1 for _ in references(text, page.name))
        problems += problems_in(text, str(page.relative_to(ROOT)), with_mig if page.name in MIG_PAGES else rendered,
                                used=used)
    assert problems == []
    assert counted >= 100, f"only {counted} names found in the runbooks' commands: is the parser still reading them?"
    assert sorted(set(EXTERNAL) - used) == [], "EXTERNAL entries no command uses"


def test_every_placeholder_a_command_uses_is_documented_or_set_on_the_page():
    documented = _documented_placeholders()
    assert {"NAMESPACE", "ENGINE", "TENANT", "POD"} <= documented
    undocumented = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        commands = list(_commands(text))
        assigned = {m for line in commands for m in re.findall(r"(?:^|[\s;(])(?:export\s+)?([A-Z_][A-Z0-9_]*)=", line)}
        assigned |= {m for line in commands for m in re.findall(r"\bfor\s+([A-Z_][A-Z0-9_]*)\s+in\b", line)}
        for line in commands:
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
    for line in _commands(text):
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
