"""Reading runbooks' commands: the kubectl invocations in their fenced blocks, the names those
use (namespace, kind and name, label keys and values), and whether the manifests the Pulumi program
renders for a stack have them. tests/unit/test_runbooks.py runs it over every runbook."""

from __future__ import annotations

import itertools
import re
import shlex
import textwrap
from dataclasses import dataclass
from typing import Any, Iterator

from tenantry.manifests.offline import Secret, render
from tenantry.stacks import plan_stack, stack_path


def code_blocks(text: str) -> list[str]:
    """Fenced blocks, also those indented under a list item (their indentation removed)."""
    return [textwrap.dedent(m.group(2)) for m in
            re.finditer(r"^( *)```[a-z]*\n(.*?)^\1```", text, flags=re.MULTILINE | re.DOTALL)]


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
    "scaledobject": "ScaledObject", "scaledobjects": "ScaledObject", "so": "ScaledObject",
    "leaderworkerset": "LeaderWorkerSet", "leaderworkersets": "LeaderWorkerSet", "lws": "LeaderWorkerSet",
    "gateway.gateway.networking.k8s.io": "Gateway", "gateways.gateway.networking.k8s.io": "Gateway",
}
"""kubectl's resource words → the kinds whose names the test checks."""
UNCHECKED = {"po", "pod", "pods", "event", "events", "ev", "backups.postgresql.cnpg.io", "backup.postgresql.cnpg.io",
             "rs", "replicaset", "replicasets", "endpoints", "ep", "all", "lease", "leases",
             "certificates.cert-manager.io", "certificaterequests.cert-manager.io"}
"""Resource words whose names are made at run time (pods, events, backups) or by a chart's own templates (the
Barman Cloud plugin's Certificates): not in any manifest."""
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
    ("Deployment", "cert-manager", "cert-manager"): "the cert-manager chart's controller (release cert-manager)",
    ("Deployment", "istio-system", "istiod"): "the istiod chart's control plane (charts/istiod), which makes each "
                                              "Gateway's Deployment",
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


def commands(text: str) -> Iterator[str]:
    """Each line of each fenced block, continuation lines joined, comments cut."""
    for block in code_blocks(text):
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


VALUE_FLAGS = {"-n", "--namespace", "-l", "--selector", "-L", "--label-columns", "-c", "--container", "-o",
               "--output", "-f", "--filename", "--field-selector", "--sort-by", "--for", "--timeout", "--tail",
               "--since", "--type", "-p", "--patch", "--from", "--replicas", "--to-revision"}
"""kubectl flags followed by a value (its word is not a positional argument)."""


def _parse(words: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """A kubectl invocation's positional words and its flags' values, up to `--`."""
    positional: list[str] = []
    flags: dict[str, list[str]] = {}
    it = iter(range(len(words)))
    for i in it:
        w = words[i]
        if w == "--":
            break
        if w in VALUE_FLAGS and i + 1 < len(words):
            flags.setdefault(w, []).append(words[i + 1])
            next(it, None)
        elif w.startswith("--") and "=" in w:
            flag, _, value = w.partition("=")
            flags.setdefault(flag, []).append(value)
        elif not w.startswith("-"):
            positional.append(w)
    return positional, flags


def _flag_refs(flags: dict[str, list[str]], namespace: str, command: str, where: str) -> Iterator[Ref]:
    """The namespace, label keys and values, and `--from` sources a command's flags name."""
    if namespace:
        yield Ref("Namespace", "", namespace, where, command)
    for selector in flags.get("-l", []) + flags.get("--selector", []):
        for key, value in _selector_refs(selector):
            yield Ref("Label", "", key, where, command)
            if value is not None:
                yield Ref("LabelValue", "", f"{key}={value}", where, command)
    for columns in flags.get("-L", []) + flags.get("--label-columns", []):
        yield from (Ref("Label", "", key, where, command) for key in columns.split(","))
    for key in re.findall(r"\.metadata\.labels\.((?:[\w-]|\\\.|/)+)", command):
        yield Ref("Label", "", key.replace("\\.", "."), where, command)
    for source in flags.get("--from", []):
        kind, _, name = source.partition("/")
        if kind in KINDS and name:
            yield Ref(KINDS[kind], namespace, name, where, command)


def _positional_refs(verb: str, rest: list[str], namespace: str, command: str, where: str) -> Iterator[Ref]:
    """The objects a command's arguments name: `kind/name` words, or a kind word and the names after it."""
    if verb == "cnpg" and len(rest) >= 2:
        yield Ref("Cluster", namespace, rest[1], where, command)
        return
    if verb == "create" and len(rest) >= 2 and rest[0] in KINDS and not rest[1].startswith("-"):
        yield Ref("Created", namespace, f"{KINDS[rest[0]]}/{rest[1]}", where, command)
    if verb not in NAME_VERBS:
        return
    if verb == "rollout":
        rest = rest[1:]
    if verb in {"cordon", "uncordon", "drain"}:
        yield from (Ref("Node", "", n, where, command) for n in rest)
        return
    typed = [w for w in rest if "/" in w and w.split("/", 1)[0] in KINDS.keys() | UNCHECKED]
    yield from (Ref(KINDS[w.split("/", 1)[0]], namespace, w.split("/", 1)[1], where, command)
                for w in typed if w.split("/", 1)[0] in KINDS)
    if typed or not rest:
        if verb == "label" and typed:
            yield from _label_args(rest, where, command)
        return
    kind_word = rest[0]
    if kind_word in UNCHECKED or "," in kind_word:
        return
    if kind_word not in KINDS:
        if verb in {"get", "describe", "delete", "edit", "patch", "label", "annotate", "scale", "wait"}:
            yield Ref("UnknownKind", namespace, kind_word, where, command)
        return
    names = [w for w in rest[1:] if "=" not in w and not w.endswith("-")]
    yield from (Ref(KINDS[kind_word], namespace, n, where, command) for n in names)
    if verb == "label":
        yield from _label_args(rest[1:], where, command)


def references(text: str, where: str) -> Iterator[Ref]:
    """The names every kubectl command in `text` uses (before placeholders are filled in)."""
    for line in commands(text):
        for words in _kubectl_segments(line):
            positional, flags = _parse(words)
            namespace = (flags.get("-n") or flags.get("--namespace") or [""])[0]
            command = "kubectl " + " ".join(words)
            yield from _flag_refs(flags, namespace, command, where)
            if positional:
                yield from _positional_refs(positional[0], positional[1:], namespace, command, where)


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
    # istiod makes a Deployment and a Service `<gateway>-istio` for each Gateway (KvRoutingPlan.gateway_deployment).
    objects |= {(kind, plan.platform.namespace, e.routing.gateway_deployment)
                for e in plan.engines if e.routing for kind in ("Deployment", "Service")}
    maps = list(_label_maps(manifests))
    placeholders = {
        "NAMESPACE": (plan.platform.namespace,),
        "ENGINE": tuple(e.name for e in plan.engines),
        # An engine named as a workload of one kind: only the engines that kind runs (a command for
        # autoscaled engines is checked against those).
        "ENGINE@ScaledObject": tuple(e.name for e in plan.engines if e.autoscaling),
        "ENGINE@LeaderWorkerSet": tuple(e.name for e in plan.engines if e.pipeline_parallel > 1),
        "ENGINE@Deployment": tuple(e.name for e in plan.engines if e.pipeline_parallel == 1),
        "TENANT": tuple(t.name for t in plan.tenants),
        "TIER": tuple(sorted({t.tier for t in plan.tenants})),
        "NODE": tuple(n for p in plan.pools for n in p.node_names or ()),
        "POOL": tuple(p.name for p in plan.pools),
        # A kv-aware engine's Gateway, its Deployment (istiod's) and its endpoint picker's Deployment.
        "INFERENCE_GATEWAY": tuple(e.routing.gateway for e in plan.engines if e.routing),
        "GATEWAY_DEPLOYMENT": tuple(e.routing.gateway_deployment for e in plan.engines if e.routing),
        "PICKER": tuple(e.routing.picker_deployment for e in plan.engines if e.routing),
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

    combos = itertools.product(*(rendered.placeholders.get(f"{n}@{ref.kind}", rendered.placeholders[n])
                                 for n in names))
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


def merged(a: Rendered, b: Rendered) -> Rendered:
    return Rendered(a.objects | b.objects, a.label_keys | b.label_keys, a.label_pairs | b.label_pairs,
                    {k: tuple(dict.fromkeys(a.placeholders.get(k, ()) + b.placeholders.get(k, ())))
                     for k in a.placeholders.keys() | b.placeholders.keys()})
