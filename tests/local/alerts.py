"""What the local stack's webhook receiver was sent, for the live alerting tests:
each notification Alertmanager posted to /page or /ticket, read back from
<stack>/alerts/received.jsonl, and the receiver Alertmanager's own routing
picks for a set of labels."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest

from tenantry.local.alert_receiver import Notification, received
from tenantry.local.services import SYSTEM_PROGRAMS

AMTOOL = SYSTEM_PROGRAMS["alertmanager"][0].with_name("amtool")


def notifications(stack, since: float) -> list[Notification]:
    """Every alert the stack's receiver was posted since `since`, one per alert of each post."""
    return received(stack.layout.alerts_received, since)


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


