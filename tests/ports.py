"""A free port on 127.0.0.1 for a server a test starts (every one listens there only)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now: the kernel's choice for a socket bound to port 0 (another process may take it
    before the server binds it, which that server's start-up then reports)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
