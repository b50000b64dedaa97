"""Connectivity as a table, checked by a real analyser (issue 34).

From the Plan, the flows the platform needs (the gateway to each engine, the stages of an engine across nodes to each
other, every pod that has an egress policy to the cluster's DNS both as kube-dns and as NodeLocal DNSCache,
Prometheus to every metrics port, ...) and those it must never allow (a tenant to an engine or the database, one
tenant to another, an engine to the internet). Each flow is stated as a NetworkPolicy of its own, and IBM's
network-config-analyzer (PyPI network-config-analyzer 2.1.0, in .venv-nca) decides, against the rendered
NetworkPolicies and the pods the rendered workloads make, whether the rendered policies permit it (its permits query)
or deny it (its forbids query). tenantry states the flows; it does not evaluate a policy itself.

The analyser sees the pods the rendering makes (Deployments, Jobs, CronJobs as rendered; a LeaderWorkerSet's leader
and worker pods as its controller labels and names them) and stand-ins for the pods others make, labelled as the
rendered policies expect them: kube-dns in kube-system, Prometheus in the monitoring namespace, CloudNativePG's
instances, the pods Istio deploys for a Gateway, and one workload per tenant namespace.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tenantry.manifests.engine_policies import group_names
from tenantry.manifests.resources import Resource
from tenantry.plan.model import EnginePlan, Plan

INTERNET = "0.0.0.0/0"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
RUNNER = Path(__file__).resolve().parent / "nca_runner.py"
ANALYSER = Path(__file__).resolve().parents[2] / ".venv-nca" / "bin" / "python"


@dataclass(frozen=True)
class Peer:
    """One end of a flow: pods by labels in one namespace, or in every namespace carrying a label, or addresses."""

    name: str
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    namespaces_with: str = ""
    """A namespace label key: the pods of every namespace that has it (every tenant's, say)."""
    cidr: str = ""

    def selector(self) -> dict[str, Any]:
        if self.cidr:
            return {"ipBlock": {"cidr": self.cidr}}
        namespaces = ({"matchExpressions": [{"key": self.namespaces_with, "operator": "Exists"}]}
                      if self.namespaces_with else {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}})
        return {"namespaceSelector": namespaces, "podSelector": {"matchLabels": dict(self.labels)}}


def pods(name: str, namespace: str, labels: dict[str, str]) -> Peer:
    return Peer(name, namespace, tuple(sorted(labels.items())))


@dataclass(frozen=True)
class Flow:
    source: Peer
    destination: Peer
    ports: tuple[tuple[str, int], ...]
    """(protocol, port); empty: every port and protocol."""
    must_pass: bool
    why: str

    @property
    def name(self) -> str:
        ports = ",".join(f"{port}/{protocol}" for protocol, port in self.ports) or "every port"
        return f"{self.source.name} -> {self.destination.name} ({ports})"

    def stated(self, name: str) -> dict[str, Any]:
        """The flow as a NetworkPolicy: egress from its source's pods where they are in one namespace, else
        ingress to its destination's (a policy selects pods in its own namespace only). The analyser weighs
        both ends' policies either way."""
        ports = [{"protocol": protocol, "port": port} for protocol, port in self.ports]
        rule: dict[str, Any] = {"ports": ports} if ports else {}
        if self.source.namespace:
            at, kind, rule = self.source, "Egress", {**rule, "to": [self.destination.selector()]}
        else:
            at, kind, rule = self.destination, "Ingress", {**rule, "from": [self.source.selector()]}
        assert at.namespace, f"flow {self.name}: one end must be pods of one namespace"
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": at.namespace},
                "spec": {"podSelector": {"matchLabels": dict(at.labels)}, "policyTypes": [kind],
                         kind.lower(): [rule]}}


@dataclass(frozen=True)
class Verdict:
    flow: Flow
    holds: bool
    analyser: str


DNS = (("UDP", 53), ("TCP", 53))


def flows(plan: Plan, manifests: list[dict[str, Any]]) -> list[Flow]:
    """The table for a stack, from its Plan and what is rendered for it."""
    from tenantry.deploy import gateway, postgres, redis
    from tenantry.deploy.common import (COMPONENT_LABEL, KUBE_DNS_POD_LABELS, NODE_LOCAL_DNS_CIDR,
                                        PROMETHEUS_POD_LABELS, TENANT_LABEL)
    from tenantry.deploy.engine import PORT as ENGINE_PORT, engine_selector
    from tenantry.deploy.model_cache import CACHE_COMPONENT
    from tenantry.pins import chart

    ns = plan.platform.namespace
    the_gateway = pods("gateway", ns, gateway.SELECTOR)
    prometheus = pods("prometheus", chart("kube-prometheus-stack").namespace, PROMETHEUS_POD_LABELS)
    dns = (pods("kube-dns", "kube-system", KUBE_DNS_POD_LABELS), Peer("nodelocal-dns", cidr=NODE_LOCAL_DNS_CIDR))
    internet = Peer("internet", cidr=INTERNET)
    database, cache = pods("postgres", ns, {"cnpg.io/cluster": postgres.CLUSTER_NAME}), pods("redis", ns, redis.SELECTOR)
    every_tenant = Peer("every tenant", namespaces_with=TENANT_LABEL)
    table = [
        Flow(the_gateway, database, (("TCP", postgres.PORT),), True, "keys, budgets and spend"),
        Flow(the_gateway, cache, (("TCP", redis.PORT),), True, "limits shared across replicas"),
        Flow(prometheus, cache, (("TCP", redis.EXPORTER_PORT),), True, "Redis's exporter"),
        Flow(prometheus, the_gateway, (("TCP", gateway.PORT),), True, "the gateway's metrics"),
        Flow(prometheus, database, (("TCP", postgres.METRICS_PORT_NUMBER),), True, "the instances' exporter"),
        Flow(every_tenant, the_gateway, (("TCP", gateway.PORT),), True, "a tenant's one way in"),
        Flow(every_tenant, database, (), False, "the database is the gateway's"),
        Flow(every_tenant, cache, (), False, "Redis is the gateway's"),
        Flow(every_tenant, pods("every engine", ns, {COMPONENT_LABEL: "engine"}), (), False,
             "engines are reached only through the gateway"),
    ]
    if any(m["kind"] == "Job" and (m["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == CACHE_COMPONENT
           for m in manifests):
        fetchers = pods("fetch-jobs", ns, {COMPONENT_LABEL: CACHE_COMPONENT})
        table += [Flow(fetchers, internet, (("TCP", 443),), True, "the Hub or a bucket fills the cache claims"),
                  *(Flow(fetchers, server, DNS, True, "the sources' names") for server in dns)]
    for e in plan.engines:
        engine = pods(e.name, ns, engine_selector(e.name))
        table += [
            Flow(prometheus, engine, (("TCP", ENGINE_PORT),), True, "vLLM's metrics"),
            *(Flow(engine, server, DNS, True, "names") for server in dns),
            Flow(engine, internet, (("TCP", 443),), False, "engines run offline from their claims"),
            Flow(internet, engine, (("TCP", ENGINE_PORT),), False, "engines are reached only through the gateway"),
        ]
        if e.pipeline_parallel > 1:
            table.append(Flow(engine, engine, (), True, "the stages of a replica across nodes: torch.distributed's "
                                                        "store, NCCL and vLLM's messages on ports they pick"))
        if e.routing is None:
            table.append(Flow(the_gateway, engine, (("TCP", ENGINE_PORT),), True, "LiteLLM calls the engine"))
            continue
        table += _kv_routing_flows(e, ns, the_gateway, engine, prometheus)
    for t in plan.tenants:
        tenant = pods(f"tenant {t.name}", t.namespace, {})
        table += [*(Flow(tenant, server, DNS, True, "names") for server in dns),
                  Flow(every_tenant, tenant, (), False, "tenants are apart, even from their own namespace's pods")]
    return table


def _kv_routing_flows(e: EnginePlan, ns: str, the_gateway: Peer, engine: Peer, prometheus: Peer) -> list[Flow]:
    """A kv-aware engine's path: LiteLLM to its Gateway's Envoy, which asks the picker and sends to the replica."""
    from tenantry.deploy.endpoint_picker import PICKER_METRICS_PORT, PICKER_PORT, picker_selector
    from tenantry.deploy.engine import PORT as ENGINE_PORT
    from tenantry.deploy.kv_routing import GATEWAY_NAME_LABEL, GATEWAY_PORT

    assert e.routing is not None
    istio = pods(e.routing.gateway_deployment, ns, {GATEWAY_NAME_LABEL: e.routing.gateway})
    picker = pods(e.routing.picker_deployment, ns, picker_selector(e))
    return [Flow(the_gateway, istio, (("TCP", GATEWAY_PORT),), True, "LiteLLM calls the engine's Gateway"),
            Flow(istio, engine, (("TCP", ENGINE_PORT),), True, "the Gateway sends to the replica picked"),
            Flow(istio, picker, (("TCP", PICKER_PORT),), True, "the Gateway asks the picker (ext-proc)"),
            Flow(picker, engine, (("TCP", ENGINE_PORT),), True, "the picker reads the replicas' metrics"),
            Flow(prometheus, picker, (("TCP", PICKER_METRICS_PORT),), True, "the picker's metrics")]


def cluster(plan: Plan, manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespaces (labelled with their name, as the API server does) and the workloads the analyser needs: as
    rendered, a LeaderWorkerSet's pods as its controller makes them, and stand-ins for the pods others make."""
    from tenantry.deploy.common import KUBE_DNS_POD_LABELS, PROMETHEUS_POD_LABELS
    from tenantry.deploy.engine import LWS_WORKER_INDEX_LABEL
    from tenantry.deploy.kv_routing import GATEWAY_NAME_LABEL
    from tenantry.deploy.postgres import CLUSTER_NAME
    from tenantry.pins import chart

    objects = [copy.deepcopy(m) for m in manifests if m["kind"] in ("Namespace", *WORKLOAD_KINDS)]
    namespaces = {m["metadata"]["name"] for m in objects if m["kind"] == "Namespace"}
    namespaces |= {"kube-system", chart("kube-prometheus-stack").namespace, plan.platform.namespace}

    def pod(name: str, namespace: str, labels: dict[str, str], template: dict | None = None) -> dict[str, Any]:
        spec = (template or {}).get("spec") or {"containers": [{"name": "main", "image": "stand-in"}]}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                                "labels": labels}, "spec": spec}

    for group in (m for m in manifests if m["kind"] == "LeaderWorkerSet"):
        names = group_names(Resource("LeaderWorkerSet", group["metadata"]["name"], group))
        template = group["spec"]["leaderWorkerTemplate"]
        for replica in range(group["spec"].get("replicas") or 1):
            common = {"leaderworkerset.sigs.k8s.io/name": names.group,
                      "leaderworkerset.sigs.k8s.io/group-index": str(replica)}
            leader = template["leaderTemplate"]
            objects.append(pod(f"{names.group}-{replica}", names.namespace, {
                **leader["metadata"]["labels"], **common, LWS_WORKER_INDEX_LABEL: "0"}, leader))
            for worker in range(1, template["size"]):
                objects.append(pod(f"{names.group}-{replica}-{worker}", names.namespace, {
                    **template["workerTemplate"]["metadata"]["labels"], **common,
                    LWS_WORKER_INDEX_LABEL: str(worker)}, template["workerTemplate"]))
    objects += [pod("coredns", "kube-system", KUBE_DNS_POD_LABELS),
                pod("prometheus", chart("kube-prometheus-stack").namespace, PROMETHEUS_POD_LABELS),
                pod(f"{CLUSTER_NAME}-1", plan.platform.namespace, {"cnpg.io/cluster": CLUSTER_NAME})]
    objects += [pod(f"{m['metadata']['name']}-istio", m["metadata"]["namespace"],
                    {GATEWAY_NAME_LABEL: m["metadata"]["name"]})
                for m in manifests if m["kind"] == "Gateway"]
    objects += [pod("workload", t.namespace, {"app": "client"}) for t in plan.tenants]
    for m in objects:
        if m["kind"] == "Namespace":
            m["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = m["metadata"]["name"]
            namespaces.discard(m["metadata"]["name"])
    objects += [{"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}} for n in sorted(namespaces)]
    return objects


class AnalyserMissing(RuntimeError):
    pass


def analyse(plan: Plan, manifests: list[dict[str, Any]], table: list[Flow] | None = None) -> list[Verdict]:
    """Each flow of the table (flows() unless given) as the analyser decides it against the rendered objects."""
    if not ANALYSER.exists():
        raise AnalyserMissing(f"network-config-analyzer is not installed ({ANALYSER}): run `make venv`")
    table = flows(plan, manifests) if table is None else table
    with tempfile.TemporaryDirectory(prefix="tenantry-nca-") as work:
        root = Path(work)
        (root / "cluster.yaml").write_text(yaml.safe_dump_all(cluster(plan, manifests)), encoding="utf-8")
        policies = [m for m in manifests if m["kind"] == "NetworkPolicy"]
        (root / "policies.yaml").write_text(yaml.safe_dump_all(policies), encoding="utf-8")
        groups: dict[tuple[bool, str], list[dict[str, str]]] = {}
        for i, flow in enumerate(table):
            stated = root / f"flow-{i}.yaml"
            policy = flow.stated(f"flow-{i}")
            stated.write_text(yaml.safe_dump(policy), encoding="utf-8")
            groups.setdefault((flow.must_pass, policy["spec"]["policyTypes"][0]), []).append(
                {"name": str(i), "file": str(stated)})
        # One query per group of flows stated alike (must pass or not, egress or ingress), where a query per flow
        # took 2.5 min for h200-many-adapters' 81 flows on a loaded machine; a failing group is asked flow by flow.
        job = {"cluster": str(root / "cluster.yaml"), "policies": str(root / "policies.yaml"),
               "groups": [{"name": f"{'pass' if must_pass else 'deny'}-{kind}", "must_pass": must_pass,
                           "flows": flows} for (must_pass, kind), flows in groups.items()]}
        (root / "job.json").write_text(json.dumps(job), encoding="utf-8")
        done = subprocess.run([str(ANALYSER), str(RUNNER), str(root / "job.json"), str(root / "results.json")],
                              capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"network-config-analyzer failed (exit {done.returncode}): {done.stderr[-2000:]}")
        results = json.loads((root / "results.json").read_text(encoding="utf-8"))
    return [Verdict(flow, results[str(i)]["holds"], results[str(i)]["analyser"]) for i, flow in enumerate(table)]


def problems(verdicts: list[Verdict]) -> list[str]:
    return [f"{'needed' if v.flow.must_pass else 'forbidden'} flow {v.flow.name} ({v.flow.why}): the rendered "
            f"NetworkPolicies {'deny' if v.flow.must_pass else 'allow'} it" for v in verdicts if not v.holds]
