"""The local stack waits for PostgreSQL until it accepts connections, not until its socket opens: a fresh clone's
gate stack once failed on "the database system is starting up" (2026-12-07). The server here speaks PostgreSQL's
wire protocol on its Unix socket just far enough to answer a client's startup message, and the real pg_isready asks."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

from tenantry.local.postgres import accepts_connections

PORT = 55432


def _error_response(sqlstate: str, message: str) -> bytes:
    fields = b"".join(code + text.encode() + b"\0"
                      for code, text in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", sqlstate), (b"M", message)))
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


class _AnsweringSocket:
    """Answers every startup message with one ErrorResponse, as a PostgreSQL does while it starts up (57P03) or
    when it refuses a password (28P01), then hangs up."""

    def __init__(self, folder: Path, answer: bytes) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(folder / f".s.PGSQL.{PORT}"))
        self.server.listen()
        self.answer = answer
        self.startups = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with client:
                length = struct.unpack("!I", client.recv(4))[0]
                client.recv(length - 4)
                self.startups += 1
                client.sendall(self.answer)

    def close(self) -> None:
        self.server.close()


def test_a_postgres_still_starting_up_is_not_taken_for_ready(tmp_path):
    starting = _AnsweringSocket(tmp_path, _error_response("57P03", "the database system is starting up"))
    try:
        assert not accepts_connections(tmp_path, PORT)
        assert starting.startups >= 1  # pg_isready reached the socket and was answered, not refused
    finally:
        starting.close()


def test_a_postgres_that_answers_is_ready_even_when_it_refuses_the_probes_login(tmp_path):
    up = _AnsweringSocket(tmp_path, _error_response("28P01", 'password authentication failed for user "root"'))
    try:
        assert accepts_connections(tmp_path, PORT)
    finally:
        up.close()


def test_no_server_at_all_is_not_ready(tmp_path):
    assert not accepts_connections(tmp_path, PORT)
