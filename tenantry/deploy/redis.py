"""Redis for LiteLLM's rate-limit and concurrency counters, shared by every
gateway replica so a tenant's limits hold across them. Counters live for
seconds to minutes, so there is no persistence: a restart forgets at most a
minute of usage."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from tenantry.deploy.common import cluster_service, labels, pinned_image, pod_security, resources, restricted_container

NAME = "tenantry-redis"
PASSWORD_SECRET = "tenantry-redis"
PORT = 6379
REDIS_USER = 10001
SELECTOR = {"app.kubernetes.io/name": "redis", "app.kubernetes.io/instance": NAME}


@dataclass(frozen=True)
class RedisArgs:
    namespace: str
    image: str


class Redis(pulumi.ComponentResource):
    def __init__(self, name: str, args: RedisArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tenantry:redis:Redis", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        pod_labels = {**labels("redis"), **SELECTOR}
        self.password = random.RandomPassword(f"{name}-password", length=40, special=False, opts=child)
        k8s.core.v1.Secret(
            f"{name}-secret",
            metadata={"name": PASSWORD_SECRET, "namespace": ns, "labels": pod_labels},
            # The password reaches redis-server in its config file, never in the environment.
            string_data={
                "password": self.password.result,
                "redis.conf": self.password.result.apply(lambda pw: (
                    f"requirepass {pw}\nsave \"\"\nappendonly no\n"
                    "maxmemory 400mb\nmaxmemory-policy volatile-lru\n"
                )),
            },
            opts=child,
        )
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
                        }],
                        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "64Mi"}},
                                    {"name": "config", "secret": {"secretName": PASSWORD_SECRET,
                                                                  "items": [{"key": "redis.conf", "path": "redis.conf"}]}}],
                    },
                },
            },
            opts=child,
        )
        cluster_service(f"{name}-service", NAME, ns, pod_labels, SELECTOR, "redis", PORT, child)
        self.host = f"{NAME}.{ns}.svc"
        self.register_outputs({"host": self.host})
