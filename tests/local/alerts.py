"""What the local stack's webhook receiver was sent, for the live alerting tests:
each notification Alertmanager posted to /page or /ticket, read back from
<stack>/alerts/received.jsonl, and the receiver Alertmanager's own routing
picks for a set of labels."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import pytest

from tenantry.local.services import SYSTEM_PROGRAMS

AMTOOL = SYSTEM_PROGRAMS["alertmanager"][0].with_name("amtool")


@dataclass(frozen=True)
class Notification:
    path: str
    received_at: float
    alert: dict

    @property
    def labels(self) -> dict[str, str]:
        return self.alert["labels"]

    @property
    def starts_at(self) -> float:
        """When the alert began (Alertmanager's RFC 3339 with nanoseconds; Python reads microseconds)."""
        return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", self.alert["startsAt"])).timestamp()


def notifications(stack, since: float) -> list[Notification]:
    """Every alert the receiver was posted since `since`, one per alert of each post."""
    if not stack.layout.alerts_received.exists():
        return []
    found = []
    for line in stack.layout.alerts_received.read_text().splitlines():
        record = json.loads(line)
        body = record["body"]
        if record["received_at"] >= since and isinstance(body, dict):
            found += [Notification(record["path"], record["received_at"], alert) for alert in body.get("alerts", [])]
    return found


def wait_for(what: str, found: Callable[[], Notification | None], seconds: float, stack) -> Notification:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (hit := found()) is not None:
            return hit
        time.sleep(2)
    arrived = stack.layout.alerts_received.read_text() if stack.layout.alerts_received.exists() else "(nothing)"
    pytest.fail(f"{what}: nothing within {seconds:.0f} s; the receiver has:\n{arrived[-4000:]}")



def routed_to(stack, labels: dict[str, str]) -> str:
    """The receiver Alertmanager's own routing picks for these labels (amtool reads the stack's config)."""
    routed = subprocess.run([str(AMTOOL), "config", "routes", "test",
                             f"--config.file={stack.layout.alertmanager / 'alertmanager.yml'}",
                             *(f"{k}={v}" for k, v in labels.items())],
                            capture_output=True, text=True, timeout=60, check=True)
    return routed.stdout.strip()


