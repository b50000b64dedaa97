"""Alertmanager's configuration from the Plan: who is woken, what becomes a
ticket, what stays silent, and which alerts a cause makes redundant.

The same routing tree on both outlets; only the receivers' webhooks (a URL,
or a file holding it) and the notification timing differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tenantry.plan.model import Plan
from tenantry.spec.fields import Tier

PAGE, TICKET, HEARTBEAT, SILENT = "page", "ticket", "heartbeat", "silent"
"""On-call's pager, the team's queue, an external dead man's switch, nothing."""
RECEIVERS = (PAGE, TICKET, HEARTBEAT, SILENT)
WEBHOOK_RECEIVERS = (PAGE, TICKET, HEARTBEAT)
"""The receivers that deliver somewhere; `silent` never has an integration."""

CRITICAL_RECEIVER: dict[Tier, str] = {"guaranteed": PAGE, "best-effort": TICKET, "spot": TICKET}
"""Where a tenant's critical alert goes, by its tier: only a guaranteed contract is worth waking
someone for (docs/decisions.md: Who is paged)."""

WATCHDOG = "Watchdog"
"""kube-prometheus-stack's always-firing alert: delivered to the heartbeat receiver every minute, a dead man's
switch (healthchecks.io, PagerDuty's or Opsgenie's heartbeats) that pages when the pings stop, as they do when
Prometheus, Alertmanager or the path to the pager is down: nothing inside the cluster can alert on that."""
ALWAYS_FIRING = ("InfoInhibitor",)
"""kube-prometheus-stack's other always-firing alert: it exists to inhibit info alerts and notifies nobody."""

ENGINE_DOWN_SILENCES = ("EngineTtftHigh", "EngineQueueBacklog")
"""What an engine being down explains on the same engine (docs/decisions.md: What an alert inhibits). The tenants'
burn alerts are per tenant over all its engines, so no engine explains them alone."""


@dataclass(frozen=True, kw_only=True)
class Webhook:
    """Where a receiver posts: a URL, or a file holding it (a mounted Secret, so the URL stays out of
    the config)."""

    url: str | None = None
    url_file: str | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.url_file is None):
            raise ValueError(f"a webhook needs exactly one of url and url_file, got url={self.url!r}, "
                             f"url_file={self.url_file!r}")


@dataclass(frozen=True, kw_only=True)
class Timing:
    """How long Alertmanager gathers a group before its first notification, between notifications of
    a changed group, and before repeating an unchanged one."""

    group_wait: str
    group_interval: str
    repeat_interval: str


HEARTBEAT_TIMING = Timing(group_wait="0s", group_interval="1m", repeat_interval="1m")
"""The Watchdog's: a ping every minute, whatever the other alerts' timing."""
CLUSTER_TIMING = Timing(group_wait="30s", group_interval="5m", repeat_interval="4h")
"""Alertmanager's own defaults, set here because kube-prometheus-stack's chart repeats only after
twelve hours: a page still firing after four is re-sent."""


def alertmanager_config(plan: Plan, receivers: Mapping[str, Webhook], timing: Timing = CLUSTER_TIMING) -> dict[str, Any]:
    """The whole Alertmanager configuration file. `receivers` maps `page`, `ticket` and `heartbeat` to their
    webhook; a receiver left out gets no integration (its alerts are routed, and dropped)."""
    unknown = sorted(set(receivers) - set(WEBHOOK_RECEIVERS))
    if unknown:
        raise ValueError(f"receivers: {', '.join(unknown)} unknown; alerts are delivered to "
                         f"{' and '.join(WEBHOOK_RECEIVERS)} only")
    return {
        "route": _route(plan, timing),
        "inhibit_rules": _inhibit_rules(),
        "receivers": [_receiver(name, receivers.get(name)) for name in RECEIVERS],
    }


def _route(plan: Plan, timing: Timing) -> dict[str, Any]:
    """First match wins. Info is never delivered; a tenant's critical alert goes where its tier says;
    a critical alert without a tier is the platform's and pages; everything else (warnings, and any
    severity nobody foresaw) becomes a ticket, never a silent loss."""
    tiers = sorted({t.tier for t in plan.tenants})
    return {
        "receiver": TICKET,
        # One notification per alert and subject: a tenant's or an engine's trouble is not
        # batched with another's, and a budget's thresholds arrive together.
        "group_by": ["alertname", "tenant", "engine", "node", "pool"],
        "group_wait": timing.group_wait,
        "group_interval": timing.group_interval,
        "repeat_interval": timing.repeat_interval,
        "routes": [
            {"receiver": HEARTBEAT, "matchers": [f'alertname="{WATCHDOG}"'], "group_by": ["alertname"],
             "group_wait": HEARTBEAT_TIMING.group_wait, "group_interval": HEARTBEAT_TIMING.group_interval,
             "repeat_interval": HEARTBEAT_TIMING.repeat_interval},
            {"receiver": SILENT, "matchers": [_one_of("alertname", ALWAYS_FIRING)]},
            {"receiver": SILENT, "matchers": ['severity="info"']},
            *({"receiver": CRITICAL_RECEIVER[tier], "matchers": ['severity="critical"', f'tier="{tier}"']}
              for tier in tiers),
            {"receiver": PAGE, "matchers": ['severity="critical"', 'tier=""']},
        ],
    }


def _inhibit_rules() -> list[dict[str, Any]]:
    return [
        {"source_matchers": ['alertname="EngineDown"'],
         "target_matchers": [_one_of("alertname", ENGINE_DOWN_SILENCES)],
         "equal": ["engine"]},
        # The fast burn already paged for the same budget: the slow burn adds nothing.
        *({"source_matchers": [f'alertname="Tenant{objective}BudgetBurnFast"'],
           "target_matchers": [f'alertname="Tenant{objective}BudgetBurnSlow"'],
           "equal": ["tenant"]}
          for objective in ("Ttft", "Itl")),
        # With the database down, failing spend writes are its consequence, not a second incident.
        {"source_matchers": ['alertname="PostgresDown"'],
         "target_matchers": ['alertname="PostgresSpendWritesFailing"']},
    ]


def _receiver(name: str, webhook: Webhook | None) -> dict[str, Any]:
    if webhook is None:
        return {"name": name}
    target = {"url": webhook.url} if webhook.url is not None else {"url_file": webhook.url_file}
    return {"name": name, "webhook_configs": [{**target, "send_resolved": True}]}


def _one_of(label: str, values: tuple[str, ...]) -> str:
    return f'{label}=~"{"|".join(values)}"'
