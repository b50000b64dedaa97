"""The local stack's stand-in for a pager and a ticket queue: an HTTP server
that records every notification Alertmanager posts, one JSON line each (the
path it was posted to, when, and the body), so tests and people can read
what would have paged (`/page`) or opened a ticket (`/ticket`).

    python -m tenantry.local.alert_receiver --port 18193 --out .local/alerts/received.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tenantry.local.layout import HOST

HEALTH_PATH = "/-/healthy"


def serve(host: str, port: int, out: Path) -> ThreadingHTTPServer:
    """A server (not yet serving) appending each POST to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")  # kept as text: a malformed post is itself worth seeing
            record = {"path": self.path, "received_at": time.time(), "body": body}
            with lock, out.open("a", encoding="utf-8") as file:
                file.write(json.dumps(record, sort_keys=True) + "\n")
            self._answer(200, b"recorded\n")

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == HEALTH_PATH:
                self._answer(200, b"ok\n")
            else:
                self._answer(404, b"POST notifications to any path; GET /-/healthy\n")

        def _answer(self, status: int, text: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            # One write per line: the handler threads share stdout.
            sys.stdout.write(f"{self.address_string()} {format % args}\n")
            sys.stdout.flush()

    return ThreadingHTTPServer((host, port), Handler)


@dataclass(frozen=True)
class Notification:
    """One alert of one notification Alertmanager posted: the path (its receiver), when, and the alert."""
    path: str
    received_at: float
    alert: dict

    @property
    def labels(self) -> dict[str, str]:
        return self.alert["labels"]

    @property
    def status(self) -> str:
        return self.alert["status"]

    @property
    def starts_at(self) -> float:
        """When the alert began firing (Alertmanager's RFC 3339 with nanoseconds; Python reads microseconds)."""
        return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", self.alert["startsAt"])).timestamp()


def received(out: Path, since: float) -> list[Notification]:
    """Every alert the receiver recorded in `out` since `since`, one per alert of each post."""
    if not out.exists():
        return []
    found = []
    for line in out.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        body = record["body"]
        if record["received_at"] >= since and isinstance(body, dict):
            found += [Notification(record["path"], record["received_at"], alert) for alert in body.get("alerts", [])]
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file each notification is appended to")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.out)
    print(f"recording notifications posted to http://{args.host}:{args.port}/ in {args.out}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
