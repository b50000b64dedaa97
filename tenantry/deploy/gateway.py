"""The LiteLLM gateway: config rendered from the Plan, the tenant-policy
plugin, secrets from Pulumi, replicas behind a Service with a
PodDisruptionBudget and an autoscaler, and the tenant reconciler: a Job named
by a digest of the desired teams, so that `pulumi up` reruns and awaits it
whenever a tenant changes, and a CronJob that undoes changes made by hand
(docs/decisions.md: The tenant reconciler is a Job)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
import yaml

from tenantry.monitoring.rules import RECONCILER_CRONJOB
from tenantry.deploy.common import (
    TIMEOUT_ANNOTATION,
    cluster_service,
    labels,
    pinned_image,
    pod_security,
    resources,
    restricted_container,
    service_monitor,
    spread_across_nodes,
)
from tenantry.plan.model import EnginePlan, Plan
from tenantry.configs.litellm import (
    GATEWAY_ENVIRONMENT,
    LIVENESS_PATH,
    PLUGIN_FILES,
    READINESS_PATH,
    litellm_config,
    tenant_policy_settings,
)
from tenantry.configs.teams import desired_teams

GATEWAY_DIR = Path(__file__).resolve().parent.parent / "gateway"
NAME = "tenantry-gateway"
PORT = 4000
CONFIG_DIR = "/etc/tenantry"
SELECTOR = {"app.kubernetes.io/name": "litellm", "app.kubernetes.io/instance": NAME}
RECONCILER_SELECTOR = {"app.kubernetes.io/name": "tenantry-reconciler"}
MASTER_KEY_SECRET = "tenantry-gateway-master-key"
ENV_SECRET = "tenantry-gateway-env"
KEYS_SECRET = "tenantry-tenant-keys"
RECONCILER_CONFIGMAP = "tenantry-reconciler"
GATEWAY_PRIORITY_CLASS = "tenantry-gateway"
LITELLM_USER = 10001
READY_SECONDS = 1200
"""How long `pulumi up` waits for the gateway's replicas on a fresh cluster: a first pull of LiteLLM's image (over
a GB), its database migrations and the keys' first load; 10 minutes, pulumi-kubernetes' default, is short."""


@dataclass(frozen=True)
class GatewayArgs:
    plan: Plan
    namespace: str
    image: str
    engine_urls: dict[str, str]
    database_url: pulumi.Output[str]
    redis_host: str
    redis_port: int
    redis_password: pulumi.Output[str]
    tenant_keys: dict[str, pulumi.Output[str]]
    prometheus_url: str
    """Where the tenant-policy plugin reads the engines' live load."""
    monitoring_release: pulumi.Resource
    """The Helm release that installs the ServiceMonitor CRD."""
    metrics_release: pulumi.Resource | None = None
    """The Helm release that serves metrics.k8s.io, when the Plan installs one (cluster.metrics_api)."""
    waits_for: list[pulumi.Resource] = field(default_factory=list)
    """What LiteLLM needs ready before it starts: the PostgreSQL Cluster, the kv-aware engines' Gateways."""


class Gateway(pulumi.ComponentResource):
    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:gateway:Gateway", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        pod_labels = {**labels("gateway"), **SELECTOR}
        self._secrets(name, args, pod_labels)
        config = _config_files(args)
        k8s.core.v1.ConfigMap(
            f"{name}-config", metadata={"name": NAME, "namespace": ns, "labels": pod_labels}, data=config, opts=child
        )
        config_digest = config_map_digest(config)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": NAME, "namespace": ns, "labels": pod_labels,
                      "annotations": {TIMEOUT_ANNOTATION: str(READY_SECONDS)}},
            spec=_deployment_spec(args, pod_labels, config_digest),
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.waits_for),
        )
        self._disruption_budget_and_autoscaler(name, args, pod_labels)
        cluster_service(f"{name}-service", NAME, ns, pod_labels, SELECTOR, "http", PORT, child)
        # LiteLLM serves Prometheus metrics at /metrics/ behind the master key.
        service_monitor(f"{name}-monitor", NAME, ns, SELECTOR, port="http", path="/metrics/", opts=child,
                        crd_release=args.monitoring_release, bearer_secret=(MASTER_KEY_SECRET, "master-key"))
        self.url = f"http://{NAME}.{ns}.svc:{PORT}"
        self._reconciler(name, args)
        self.register_outputs({"url": self.url})

    def _secrets(self, name: str, args: GatewayArgs, pod_labels: dict[str, str]) -> None:
        """A generated master key (its own Secret, read by the reconciler and
        Prometheus) and LiteLLM's environment: the key, the database, Redis."""
        child = pulumi.ResourceOptions(parent=self)
        master = random.RandomPassword(f"{name}-master-key", length=48, special=False, opts=child)
        master_key = pulumi.Output.secret(master.result.apply(lambda r: f"sk-{r}"))
        k8s.core.v1.Secret(
            f"{name}-master-key-secret",
            metadata={"name": MASTER_KEY_SECRET, "namespace": args.namespace, "labels": pod_labels},
            string_data={"master-key": master_key},
            opts=child,
        )
        k8s.core.v1.Secret(
            f"{name}-env",
            metadata={"name": ENV_SECRET, "namespace": args.namespace, "labels": pod_labels},
            string_data={"LITELLM_MASTER_KEY": master_key, "DATABASE_URL": args.database_url,
                         "REDIS_PASSWORD": args.redis_password},
            opts=child,
        )

    def _disruption_budget_and_autoscaler(self, name: str, args: GatewayArgs, pod_labels: dict[str, str]) -> None:
        child = pulumi.ResourceOptions(parent=self)
        replicas = args.plan.gateway.replicas
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata={"name": NAME, "namespace": args.namespace, "labels": pod_labels},
            spec={"minAvailable": max(1, replicas - 1), "selector": {"matchLabels": SELECTOR}},
            opts=child,
        )
        # It reads CPU from metrics.k8s.io: where tenantry installs that API, it waits for
        # the release (docs/decisions.md: The gateway's autoscaler reads metrics-server).
        if args.plan.cluster.metrics_api == "install" and args.metrics_release is None:
            raise ValueError("the plan installs metrics-server (cluster.metrics_api) but the gateway was not given "
                             "its release")
        depends = [args.metrics_release] if args.metrics_release is not None else []
        k8s.autoscaling.v2.HorizontalPodAutoscaler(
            f"{name}-hpa",
            metadata={"name": NAME, "namespace": args.namespace, "labels": pod_labels},
            spec={
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
                "minReplicas": replicas,
                "maxReplicas": args.plan.gateway.max_replicas,
                # A LiteLLM worker is CPU-bound (docs/decisions.md: The gateway autoscales on CPU).
                "metrics": [{"type": "Resource", "resource": {
                    "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}],
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
        )

    def _reconciler(self, name: str, args: GatewayArgs) -> None:
        """The Job that makes LiteLLM's teams and keys what the Plan says, rerun
        whenever the desired teams change, and a CronJob that undoes drift."""
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        files = _reconciler_files(args.plan)
        job_labels = {**labels("reconciler"), **RECONCILER_SELECTOR}
        k8s.core.v1.ConfigMap(
            f"{name}-reconciler", metadata={"name": RECONCILER_CONFIGMAP, "namespace": ns, "labels": job_labels},
            data=files, opts=child,
        )
        keys_json = pulumi.Output.secret(
            pulumi.Output.all(**args.tenant_keys).apply(lambda keys: json.dumps(dict(sorted(keys.items()))))
        )
        keys_secret = k8s.core.v1.Secret(
            f"{name}-tenant-keys",
            metadata={"name": KEYS_SECRET, "namespace": ns, "labels": job_labels},
            string_data={"keys.json": keys_json},
            opts=child,
        )
        pod = _reconciler_pod(args, self.url, job_labels)
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:10]
        k8s.batch.v1.Job(
            f"{name}-reconcile",
            metadata={"name": f"{RECONCILER_CRONJOB}-{digest}", "namespace": ns, "labels": job_labels},
            spec={"backoffLimit": 6, "ttlSecondsAfterFinished": 86400, "template": pod},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[keys_secret, self.deployment]),
        )
        k8s.batch.v1.CronJob(
            f"{name}-reconcile-drift",
            metadata={"name": RECONCILER_CRONJOB, "namespace": ns, "labels": job_labels},
            spec={"schedule": "*/15 * * * *", "concurrencyPolicy": "Forbid", "successfulJobsHistoryLimit": 1,
                  "failedJobsHistoryLimit": 3,
                  # Labelled as the one-shot Job is: on-call lists both kinds of run by the same selector.
                  "jobTemplate": {"metadata": {"labels": job_labels}, "spec": {"backoffLimit": 2, "template": pod}}},
            opts=child,
        )


def _config_files(args: GatewayArgs) -> dict[str, str]:
    """LiteLLM's config, the tenant-policy plugin's settings and the plugin itself, mounted side by side."""
    plan = args.plan

    def api_base(engine: EnginePlan) -> str:
        return args.engine_urls[engine.name]

    return {
        "config.yaml": yaml.safe_dump(litellm_config(plan, api_base), sort_keys=False),
        "tenant-policy.json": json.dumps(tenant_policy_settings(plan, prometheus_url=args.prometheus_url),
                                         indent=2, sort_keys=True),
        **{name: (GATEWAY_DIR / name).read_text(encoding="utf-8") for name in PLUGIN_FILES},
    }


def config_map_digest(data: dict[str, str]) -> str:
    """The ConfigMap's data as its pods were started with, on their template (`tenantry.io/config-digest`): a
    change restarts them, and on-call can tell whether the running ConfigMap is the one a ReplicaSet was made for
    (`kubectl rollout undo` reverts the template, not the ConfigMap). Compact JSON with sorted keys, as
    `jq -jcS .data | sha256sum` prints it (runbooks/GatewayReplicaDown.md)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()[:16]


def _deployment_spec(args: GatewayArgs, pod_labels: dict[str, str], config_digest: str) -> dict[str, Any]:
    return {
        "replicas": args.plan.gateway.replicas,
        "selector": {"matchLabels": SELECTOR},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {
            # Restart the pods when the config or the plugin changes, not only when the Deployment does.
            "metadata": {"labels": pod_labels, "annotations": {"tenantry.io/config-digest": config_digest}},
            "spec": {
                "priorityClassName": GATEWAY_PRIORITY_CLASS,
                "automountServiceAccountToken": False,
                "securityContext": pod_security(LITELLM_USER),
                "affinity": spread_across_nodes(SELECTOR),
                "containers": [_litellm_container(args)],
                "volumes": [{"name": "config", "configMap": {"name": NAME}},
                            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
            },
        },
    }


def _litellm_container(args: GatewayArgs) -> dict[str, Any]:
    env = [
        *({"name": name, "value": value} for name, value in GATEWAY_ENVIRONMENT.items()),
        {"name": "TENANTRY_POLICY_FILE", "value": f"{CONFIG_DIR}/tenant-policy.json"},
        {"name": "REDIS_HOST", "value": args.redis_host},
        {"name": "REDIS_PORT", "value": str(args.redis_port)},
        {"name": "HOME", "value": "/tmp"},
    ]
    probe = {"periodSeconds": 10, "timeoutSeconds": 5}
    return {
        "name": "litellm",
        **pinned_image(args.image),
        "args": ["--config", f"{CONFIG_DIR}/config.yaml", "--port", str(PORT)],
        "ports": [{"name": "http", "containerPort": PORT}],
        "env": env,
        "envFrom": [{"secretRef": {"name": ENV_SECRET}}],
        "resources": resources(1.0, 2 * 2**30),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "startupProbe": {**probe, "httpGet": {"path": LIVENESS_PATH, "port": "http"}, "failureThreshold": 30},
        "readinessProbe": {**probe, "httpGet": {"path": READINESS_PATH, "port": "http"}, "failureThreshold": 3},
        "livenessProbe": {**probe, "httpGet": {"path": LIVENESS_PATH, "port": "http"}, "failureThreshold": 6},
        # LiteLLM writes its Prisma client and caches at start.
        "securityContext": restricted_container(read_only_root=False, user=LITELLM_USER),
    }


def _reconciler_files(plan: Plan) -> dict[str, str]:
    """The reconciler's script and its desired teams; their digest names the Job."""
    return {
        "reconciler.py": (GATEWAY_DIR / "reconciler.py").read_text(encoding="utf-8"),
        "teams.json": json.dumps(desired_teams(plan), indent=2, sort_keys=True),
    }


def _reconciler_pod(args: GatewayArgs, gateway_url: str, job_labels: dict[str, str]) -> dict[str, Any]:
    """The reconciler's pod, in the LiteLLM image (the script needs only the standard library)."""
    return {
        "metadata": {"labels": job_labels},
        "spec": {
            "restartPolicy": "OnFailure",
            "automountServiceAccountToken": False,
            "securityContext": pod_security(LITELLM_USER),
            "containers": [{
                "name": "reconcile",
                **pinned_image(args.image),
                "command": ["python3", "/reconciler/reconciler.py"],
                "env": [
                    {"name": "LITELLM_URL", "value": gateway_url},
                    {"name": "LITELLM_MASTER_KEY_FILE", "value": "/master-key/master-key"},
                    {"name": "TENANTRY_TEAMS", "value": "/reconciler/teams.json"},
                    {"name": "TENANTRY_KEYS", "value": "/keys/keys.json"},
                ],
                "resources": resources(0.1, 128 * 2**20),
                "volumeMounts": [{"name": "reconciler", "mountPath": "/reconciler", "readOnly": True},
                                 {"name": "keys", "mountPath": "/keys", "readOnly": True},
                                 {"name": "master-key", "mountPath": "/master-key", "readOnly": True}],
                "securityContext": restricted_container(user=LITELLM_USER),
            }],
            "volumes": [{"name": "reconciler", "configMap": {"name": RECONCILER_CONFIGMAP}},
                        {"name": "keys", "secret": {"secretName": KEYS_SECRET}},
                        {"name": "master-key", "secret": {"secretName": MASTER_KEY_SECRET}}],
        },
    }
