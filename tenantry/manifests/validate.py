"""Rendered manifests against the Kubernetes schemas of the stack's version
(kubernetes-validate, strict: unknown fields are errors); custom resources
against the CRD schema pinned beside their chart where there is one
(crd_schemas.py), and otherwise against their structure."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import kubernetes_validate

from tenantry.manifests.crd_schemas import crd_problems, pinned_crd_schemas
from tenantry.manifests.offline import redacted

DURATION = re.compile(r"^(\d+(ms|s|m|h))+$")
QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")


def _require(problems: list[str], where: str, condition: bool, message: str) -> None:
    if not condition:
        problems.append(f"{where}: {message}")


def _service_monitor(obj: dict[str, Any], where: str, problems: list[str]) -> None:
    spec = obj.get("spec") or {}
    _require(problems, where, isinstance((spec.get("selector") or {}).get("matchLabels"), dict) and spec["selector"]["matchLabels"],
             "spec.selector.matchLabels must name the Service's labels")
    endpoints = spec.get("endpoints")
    _require(problems, where, isinstance(endpoints, list) and endpoints, "spec.endpoints must be a non-empty list")
    for i, endpoint in enumerate(endpoints or []):
        _require(problems, where, isinstance(endpoint.get("port"), str), f"spec.endpoints[{i}].port must be a port name")
        _require(problems, where, str(endpoint.get("path", "/")).startswith("/"), f"spec.endpoints[{i}].path must start with /")
        _require(problems, where, bool(DURATION.match(str(endpoint.get("interval", "30s")))),
                 f"spec.endpoints[{i}].interval must be a duration")
        credentials = ((endpoint.get("authorization") or {}).get("credentials")) or {"name": "-", "key": "-"}
        _require(problems, where, bool(credentials.get("name") and credentials.get("key")),
                 f"spec.endpoints[{i}].authorization.credentials needs name and key")
    unknown = set(spec) - {"selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels"}
    _require(problems, where, not unknown, f"unknown fields {sorted(unknown)}")


def _prometheus_rule(obj: dict[str, Any], where: str, problems: list[str]) -> None:
    groups = (obj.get("spec") or {}).get("groups")
    _require(problems, where, isinstance(groups, list) and groups, "spec.groups must be a non-empty list")
    for g, group in enumerate(groups or []):
        _require(problems, where, bool(group.get("name")), f"spec.groups[{g}].name is required")
        for r, rule in enumerate(group.get("rules") or []):
            at = f"spec.groups[{g}].rules[{r}]"
            _require(problems, where, bool(rule.get("alert")) != bool(rule.get("record")), f"{at} needs alert or record")
            _require(problems, where, isinstance(rule.get("expr"), str) and rule["expr"], f"{at}.expr is required")
            if rule.get("alert"):
                annotations = rule.get("annotations") or {}
                for key in ("summary", "description", "runbook_url"):
                    _require(problems, where, bool(annotations.get(key)), f"{at} alert needs annotations.{key}")
                _require(problems, where, bool((rule.get("labels") or {}).get("severity")), f"{at} alert needs labels.severity")
                _require(problems, where, bool(DURATION.match(str(rule.get("for", "0s")))), f"{at}.for must be a duration")


def _cnpg_cluster(obj: dict[str, Any], where: str, problems: list[str]) -> None:
    spec = obj.get("spec") or {}
    _require(problems, where, isinstance(spec.get("instances"), int) and spec["instances"] >= 1, "spec.instances must be >= 1")
    _require(problems, where, bool(QUANTITY.match(str((spec.get("storage") or {}).get("size", "")))),
             "spec.storage.size must be a quantity")
    _require(problems, where, ":" in str(spec.get("imageName", "")), "spec.imageName must be a pinned image")
    # A new database (initdb) or one restored from a backup (recovery, runbooks/procedures/restore-postgres.md):
    # either way LiteLLM's database, its owner and the Secret with the owner's password, which the gateway reads.
    method = "recovery" if "recovery" in (spec.get("bootstrap") or {}) else "initdb"
    boot = (spec.get("bootstrap") or {}).get(method) or {}
    _require(problems, where, bool(boot.get("database") and boot.get("owner") and (boot.get("secret") or {}).get("name")),
             f"spec.bootstrap.{method} needs database, owner and secret.name")
    _require(problems, where, "barmanObjectStore" not in (spec.get("backup") or {}),
             "spec.backup.barmanObjectStore is removed in CloudNativePG 1.31: use the Barman Cloud plugin "
             "(spec.plugins and an ObjectStore)")
    _require(problems, where, "enablePodMonitor" not in (spec.get("monitoring") or {}),
             "spec.monitoring.enablePodMonitor is deprecated: render a PodMonitor instead")
    for i, plugin in enumerate(spec.get("plugins") or []):
        _require(problems, where, bool(plugin.get("name")), f"spec.plugins[{i}].name is required")
        if plugin.get("isWALArchiver"):
            _require(problems, where, bool((plugin.get("parameters") or {}).get("barmanObjectName")),
                     f"spec.plugins[{i}].parameters.barmanObjectName must name the ObjectStore")


def _scheduled_backup(obj: dict[str, Any], where: str, problems: list[str]) -> None:
    spec = obj.get("spec") or {}
    _require(problems, where, len(str(spec.get("schedule", "")).split()) == 6,
             "spec.schedule must be a six-field cron (seconds first)")
    _require(problems, where, bool((spec.get("cluster") or {}).get("name")), "spec.cluster.name is required")
    _require(problems, where, spec.get("method", "barmanObjectStore") in ("volumeSnapshot", "plugin"),
             "spec.method must be plugin or volumeSnapshot (barmanObjectStore is removed in CloudNativePG 1.31)")
    if spec.get("method") == "plugin":
        _require(problems, where, bool((spec.get("pluginConfiguration") or {}).get("name")),
                 "spec.pluginConfiguration.name must name the plugin")


def _object_store(obj: dict[str, Any], where: str, problems: list[str]) -> None:
    """The Barman Cloud plugin's ObjectStore (config/crd/bases/barmancloud.cnpg.io_objectstores.yaml, v0.13.0)."""
    spec = obj.get("spec") or {}
    configuration = spec.get("configuration") or {}
    _require(problems, where, str(configuration.get("destinationPath", "")).startswith(("s3://", "gs://")),
             "spec.configuration.destinationPath must be s3:// or gs://")
    _require(problems, where, "serverName" not in configuration,
             "spec.configuration.serverName must be empty (the plugin parameter serverName replaces it)")
    _require(problems, where, bool(re.match(r"^[1-9][0-9]*[dwm]$", str(spec.get("retentionPolicy", "1d")))),
             "spec.retentionPolicy must be a number and d, w or m")
    unknown = set(spec) - {"configuration", "retentionPolicy", "instanceSidecarConfiguration"}
    _require(problems, where, not unknown, f"unknown fields {sorted(unknown)}")


def _pod_monitor(obj: dict[str, Any], where: str, problems: list[str]) -> None:
    spec = obj.get("spec") or {}
    _require(problems, where, bool((spec.get("selector") or {}).get("matchLabels")),
             "spec.selector.matchLabels must name the pods' labels")
    endpoints = spec.get("podMetricsEndpoints")
    _require(problems, where, isinstance(endpoints, list) and endpoints, "spec.podMetricsEndpoints must be a non-empty list")
    for i, endpoint in enumerate(endpoints or []):
        _require(problems, where, isinstance(endpoint.get("port"), str), f"spec.podMetricsEndpoints[{i}].port must be a port name")
        _require(problems, where, str(endpoint.get("path", "/")).startswith("/"),
                 f"spec.podMetricsEndpoints[{i}].path must start with /")
    unknown = set(spec) - {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels"}
    _require(problems, where, not unknown, f"unknown fields {sorted(unknown)}")


CUSTOM_RESOURCES: dict[tuple[str, str], Callable[[dict[str, Any], str, list[str]], None]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _service_monitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): _prometheus_rule,
    ("monitoring.coreos.com/v1", "PodMonitor"): _pod_monitor,
    ("postgresql.cnpg.io/v1", "Cluster"): _cnpg_cluster,
    ("postgresql.cnpg.io/v1", "ScheduledBackup"): _scheduled_backup,
    ("barmancloud.cnpg.io/v1", "ObjectStore"): _object_store,
}


def validate_manifests(manifests: list[dict[str, Any]], kubernetes_version: str) -> list[str]:
    """Every problem found, each prefixed with the object it is in."""
    problems: list[str] = []
    for obj in manifests:
        meta = obj.get("metadata") or {}
        where = f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}".replace(" /", " ")
        crd_schema = pinned_crd_schemas().get((obj.get("apiVersion", ""), obj.get("kind", "")))
        custom = CUSTOM_RESOURCES.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        broken = crd_problems(obj, where, crd_schema) if crd_schema is not None else []
        problems += broken
        if custom is not None and not broken:  # what the schema cannot say (a selector that selects, ...)
            custom(obj, where, problems)
        if crd_schema is not None or custom is not None:
            continue
        try:
            kubernetes_validate.validate(redacted(obj), kubernetes_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{where}: no schema for {obj.get('apiVersion')} {obj.get('kind')} in Kubernetes "
                            f"{kubernetes_version}, and tenantry has no structural check for it")
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            problems.append(f"{where}: {path}: {error.message}")
    return problems
