"""A gate user's HTTP connection to a gateway (tenantry/gate/locustfile.py)."""

from __future__ import annotations

import time

import requests

IDLE_CONNECTION_SECONDS = 1.0
"""A connection idle longer is not reused: servers close idle keep-alive connections
(uvicorn, under LiteLLM, after 5 s), and a request sent as one closes is reset. The margin
covers the load generator's own stalls on a starved machine: at 3 s, a request checked at
2.9 s idle and sent after a 2.7 s stall met a closed connection (a clean clone's
gateway-killed, 2026-12-03)."""


class Connection:
    """One user's HTTP session, renewed when it has been idle too long to reuse safely."""

    def __init__(self) -> None:
        self.session = requests.Session()
        self.used_at = time.monotonic()

    def get(self) -> requests.Session:
        if time.monotonic() - self.used_at > IDLE_CONNECTION_SECONDS:
            self.session.close()
            self.session = requests.Session()
        return self.session

    def done(self) -> None:
        self.used_at = time.monotonic()

    def close(self) -> None:
        self.session.close()
