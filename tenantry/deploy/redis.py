"""Redis for LiteLLM's rate-limit and concurrency counters, shared by every
gateway replica so a tenant's limits hold across them. Counters live for
seconds to minutes, so there is no persistence: a restart forgets at most a
minute of usage."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from tenantry.deploy.common import (cluster_service, labels, pinned_image, pod_security, resources,
                                    restricted_container, service_monitor)

NAME = "tenantry-redis"
PASSWORD_SECRET = "tenantry-redis"
PORT = 6379
EXPORTER_PORT = 9121
METRICS_SERVICE = "tenantry-redis-metrics"
METRICS_LABEL = "tenantry.io/metrics"
"""On the exporter's Service alone, which its ServiceMonitor selects (the Redis Service has no metrics port)."""
REDIS_USER = 10001
SELECTOR = {"app.kubernetes.io/name": "redis", "app.kubernetes.io/instance": NAME}


@dataclass(frozen=True)
class RedisArgs:
    namespace: str
    image: str
    exporter_image: str
    monitoring_release: pulumi.Resource
    """The Helm release that installs the ServiceMonitor CRD."""


class Redis(pulumi.ComponentResource):
    def __init__(self, name: str, args: RedisArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:redis:Redis", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        pod_labels = {**labels("redis"), **SELECTOR}
        self.password = random.RandomPassword(f"{name}-password", length=40, special=False, opts=child)
        _password_secret(f"{name}-secret", ns, pod_labels, self.password, child)
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": NAME, "namespace": ns, "labels": pod_labels},
            spec={
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": SELECTOR},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "priorityClassName": "tenantry-data",
                        "automountServiceAccountToken": False,
                        "securityContext": pod_security(REDIS_USER),
                        "containers": [{
                            "name": "redis",
                            **pinned_image(args.image),
                            "command": ["redis-server", "/etc/redis/redis.conf"],
                            "ports": [{"name": "redis", "containerPort": PORT}],
                            "resources": resources(0.25, 512 * 2**20),
                            "readinessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 5},
                            "livenessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 10},
                            "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                             {"name": "config", "mountPath": "/etc/redis", "readOnly": True}],
                            "securityContext": restricted_container(user=REDIS_USER),
                        }, _exporter(args.exporter_image)],
                        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "64Mi"}},
                                    _secret_file("config", "redis.conf", "redis.conf"),
                                    _secret_file("exporter", "exporter-passwords.json", "passwords.json")],
                    },
                },
            },
            opts=child,
        )
        cluster_service(f"{name}-service", NAME, ns, pod_labels, SELECTOR, "redis", PORT, child)
        # A Service of its own for the exporter: the gateway's clients reach Redis's port alone.
        metrics_labels = {**pod_labels, METRICS_LABEL: "redis"}
        cluster_service(f"{name}-metrics-service", METRICS_SERVICE, ns, metrics_labels, SELECTOR, "metrics",
                        EXPORTER_PORT, child)
        service_monitor(f"{name}-monitor", METRICS_SERVICE, ns, {METRICS_LABEL: "redis"}, port="metrics",
                        path="/metrics", opts=child, crd_release=args.monitoring_release, interval_seconds=30)
        self.host = f"{NAME}.{ns}.svc"
        self.register_outputs({"host": self.host})


def _exporter(image: str) -> dict:
    """redis_exporter beside Redis, reading it over localhost with the password from its file."""
    return {
        "name": "exporter",
        **pinned_image(image),
        "args": [f"--redis.addr=redis://localhost:{PORT}", "--redis.password-file=/etc/redis-exporter/passwords.json"],
        "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT}],
        "resources": resources(0.05, 64 * 2**20),
        "readinessProbe": {"httpGet": {"path": "/health", "port": "metrics"}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "metrics"}, "periodSeconds": 30},
        "volumeMounts": [{"name": "exporter", "mountPath": "/etc/redis-exporter", "readOnly": True}],
        "securityContext": restricted_container(user=REDIS_USER),
    }


def _secret_file(volume: str, key: str, path: str) -> dict:
    return {"name": volume, "secret": {"secretName": PASSWORD_SECRET, "items": [{"key": key, "path": path}]}}


def _password_secret(resource_name: str, ns: str, pod_labels: dict[str, str], password: random.RandomPassword,
                     opts: pulumi.ResourceOptions) -> None:
    """Redis's configuration with its password, and the exporter's password file."""
    k8s.core.v1.Secret(
        resource_name,
        metadata={"name": PASSWORD_SECRET, "namespace": ns, "labels": pod_labels},
        # The password reaches redis-server in its config file, never in the environment.
        string_data={
            "password": password.result,
            "redis.conf": password.result.apply(lambda pw: (
                f"requirepass {pw}\nsave \"\"\nappendonly no\n"
                "maxmemory 400mb\nmaxmemory-policy volatile-lru\n"
            )),
            # The exporter's password file (its --redis.password-file, keyed by address): not in its environment.
            "exporter-passwords.json": password.result.apply(
                lambda pw: json.dumps({f"redis://localhost:{PORT}": pw})),
        },
        opts=opts,
    )
