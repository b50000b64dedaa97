"""Slots of an engine held by long streams, for the live tests that fill an engine and probe admission."""

from __future__ import annotations

import threading

import httpx
import pytest

from tenantry.gateway import tenant_policy as tp


class HeldStreams:
    """Long streams to tiny opened at once, each read to its end on a thread of its own (a reader dropped closes
    its stream, and the gateway frees its slot); entering returns once every one has had its first token.
    A held stream still ends when vLLM has generated its tokens, whether or not anyone reads them: `ended`
    tells whether one did before the probe was over, which then proves nothing about a full engine (CI: a
    probe admitted while one of three spot holders had, presumably, finished)."""

    BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hold"}], "max_tokens": 1800,
            "ignore_eos": True, "stream": True}

    def __init__(self, clients: list[httpx.Client]):
        self.clients = clients
        self.responses: list[httpx.Response | None] = [None] * len(clients)
        self.started = [threading.Event() for _ in clients]
        self.done = [threading.Event() for _ in clients]
        self.closing = False
        self.threads = [threading.Thread(target=self._hold, args=(i,), daemon=True) for i in range(len(clients))]

    def _hold(self, i: int) -> None:
        try:
            with self.clients[i].stream("POST", "/v1/chat/completions", json=self.BODY) as response:
                self.responses[i] = response
                for line in response.iter_lines():
                    if '"content"' in line:
                        self.started[i].set()
        except httpx.HTTPError:
            pass  # closed by __exit__
        finally:
            self.done[i].set()
            self.started[i].set()

    def __enter__(self) -> HeldStreams:
        for thread in self.threads:
            thread.start()
        for i, started in enumerate(self.started):
            assert started.wait(120) and not self.done[i].is_set(), f"held stream {i} ended before its first token"
            response = self.responses[i]
            assert response is not None and response.status_code == 200, response
            assert tp.REROUTE_HEADER not in response.headers, response.headers[tp.REROUTE_HEADER]
        return self

    @property
    def ended(self) -> bool:
        return any(done.is_set() for done in self.done)

    def __exit__(self, *_exc) -> None:
        for response in self.responses:
            if response is not None:
                response.close()
        for thread in self.threads:
            thread.join(30)


def while_held(clients: list[httpx.Client], probe, tries: int = 3):
    """probe(held) with the clients' streams held open, again with fresh ones while a held one ended first."""
    for _ in range(tries):
        with HeldStreams(clients) as held:
            result = probe(held)
            ended = held.ended
        if not ended:
            return result
    pytest.fail(f"in {tries} tries a held stream of {len(clients)} ended before the probe was over")
