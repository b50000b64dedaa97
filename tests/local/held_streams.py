"""Slots of an engine held by long streams, for the live tests that fill an engine and probe admission.

The tiny engine writes a whole 1,800-token stream in about three seconds, so streams left to run end while the
test is still opening the others or probing (CI: "held stream 1 ended before its first token", every holder
answered 200). Here the engine is held still instead: its scheduler and worker processes are paused (SIGSTOP)
while the streams are opened, then let run in short bursts, paused between them, until vLLM's own gauge shows
every stream running in one batch, and paused for the probe. The gauge is read only while the engine is paused:
a reply from a busy API server can arrive seconds late (CI: the streams had all ended by the time a gauge read
showed them running), and a paused engine makes no progress meanwhile. Paused, no stream can end; the engine's
API server keeps answering (metrics, health), so the gateway sees a live engine whose slots are all taken.
Nothing here waits on how fast the machine is: each wait is for a state the engine or the client reports,
bounded, and names what it saw."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx

from tenantry.gateway import tenant_policy as tp
from tenantry.local.supervisor import program_pid
from tenantry.local.layout import engine_process

WAIT_SECONDS = 120
"""The bound on each wait below (a loaded two-core machine takes seconds, not minutes, for any of them)."""
BURST_SECONDS = 0.05
"""How long the engine runs between two looks at its gauge: a few dozen of a held stream's 1,800 tokens."""


@contextlib.contextmanager
def on_time():
    """The calling thread in the real-time scheduling class for the duration (the tests run as root; elsewhere it
    stays as it was), so that a burst ends when it should, whatever else the machine runs: on a fresh clone of
    0039793 with a third stack loading the two cores, a 50 ms burst ran long enough for every held stream of the
    concurrency-cap test to finish (all four answered 200, ended before vLLM's gauge was read)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

ADDED = "Added request "
"""What vLLM's API server logs once a request is handed to its scheduler (with --enable-log-requests, which the
tests' stack runs with)."""


def scheduler_processes(layout, engine: str) -> list[int]:
    """The engine's scheduler and worker processes (vLLM names them VLLM::EngineCore, VLLM::Worker): what
    generates tokens. The API server, their parent, is left running."""
    group = program_pid(layout, engine_process(engine))
    assert group, f"engine {engine} is not running"
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            title = (stat.parent / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == group and title.startswith(b"VLLM::"):  # fields[2]: the process group
            found.append(int(stat.parent.name))
    assert found, f"engine {engine} has no VLLM:: processes in its group {group}"
    return found


def _count_from(log: Path, offset: int) -> int:
    with log.open("rb") as file:
        file.seek(offset)
        return file.read().count(ADDED.encode())


class HeldStreams:
    """Long streams to one engine, every one running on it and none able to end until the block is left.
    Each stream is read on a thread of its own; its status, first token and end (or error) are recorded, so a
    failure says what each holder saw. With `queued`, that many of the streams are held waiting in the engine's
    queue instead, the engine running the others (its max_num_seqs of them: a full engine with a queue); `extra`
    adds fields to each stream's body (a priority, for streams sent straight to the engine)."""

    BODY = {"messages": [{"role": "user", "content": "hold"}], "max_tokens": 1800, "ignore_eos": True,
            "stream": True}

    def __init__(self, stack, engine: str, clients: list[httpx.Client], *, queued: int = 0,
                 extra: dict | None = None):
        self.stack, self.engine, self.clients = stack, engine, clients
        self.queued, self.extra = queued, extra or {}
        self.status: list[int | None] = [None] * len(clients)
        self.headers: list[httpx.Headers | None] = [None] * len(clients)
        self.error: list[str | None] = [None] * len(clients)
        self.started = [threading.Event() for _ in clients]
        self.done = [threading.Event() for _ in clients]
        self.responses: list[httpx.Response | None] = [None] * len(clients)
        self.threads = [threading.Thread(target=self._hold, args=(i,), daemon=True) for i in range(len(clients))]
        self.paused: list[int] = []

    def _hold(self, i: int) -> None:
        try:
            with self.clients[i].stream("POST", "/v1/chat/completions",
                                        json={"model": self.engine, **self.BODY, **self.extra}) as response:
                self.responses[i], self.status[i], self.headers[i] = response, response.status_code, response.headers
                for line in response.iter_lines():
                    if '"content"' in line:
                        self.started[i].set()
                    elif '"error"' in line:
                        self.error[i] = line[:300]
                if response.status_code != 200:
                    self.error[i] = response.read().decode(errors="replace")[:300]
        except httpx.HTTPError as error:
            self.error[i] = self.error[i] or f"{type(error).__name__}: {error}"  # closed by __exit__, or a fault
        finally:
            self.done[i].set()

    def told(self) -> str:
        return "; ".join(f"holder {i}: status {self.status[i]}, first token {self.started[i].is_set()}, "
                         f"ended {self.done[i].is_set()}, error {self.error[i]}" for i in range(len(self.clients)))

    def _pause(self) -> None:
        self.paused = scheduler_processes(self.stack.layout, self.engine)
        for pid in self.paused:
            os.kill(pid, signal.SIGSTOP)

    def _resume(self) -> None:
        for pid in self.paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.paused = []

    def _burst(self) -> bool:
        """The engine runs for BURST_SECONDS, then is paused again (True, for use in a condition)."""
        with on_time():
            self._resume()
            try:
                time.sleep(BURST_SECONDS)
            finally:
                self._pause()
        return True

    def _wait(self, what: str, condition) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not condition():
            ended = [i for i, done in enumerate(self.done) if done.is_set()]
            assert not ended, f"waiting until {what}, holders {ended} ended: {self.told()}"
            assert time.monotonic() < deadline, f"not seen in {WAIT_SECONDS} s: {what}; {self.told()}"
            time.sleep(0.01)

    def log_size(self) -> int:
        """Where the engine's log ends now: an offset for added_since."""
        return (self.stack.layout.logs / f"engine-{self.engine}.log").stat().st_size

    def added_since(self, offset: int) -> int:
        """Requests handed to the scheduler since the engine's log had `offset` bytes (read from there on: the
        log of a stack that logs request bodies runs to megabytes)."""
        log = self.stack.layout.logs / f"engine-{self.engine}.log"
        rotated = 0
        if log.stat().st_size < offset:  # supervisord rotated it meanwhile: the rest of the old one, the new whole
            rotated, offset = _count_from(log.with_name(log.name + ".1"), offset), 0
        return rotated + _count_from(log, offset)

    def __enter__(self) -> HeldStreams:
        count, runs = len(self.clients), len(self.clients) - self.queued
        log_offset = self.log_size()
        self._pause()  # the streams queue at the engine, none runs yet
        try:
            for thread in self.threads:
                thread.start()
            self._wait(f"the engine's API server has handed {count} requests to its paused scheduler",
                       lambda: self.added_since(log_offset) >= count)
            # They are all waiting, so the scheduler's first step runs them in one batch.
            self._wait(f"vLLM runs {runs} sequences and queues {self.queued}", lambda: self._burst() and (
                self.stack.engine_metric(self.engine, "vllm:num_requests_running") >= runs
                and self.stack.engine_metric(self.engine, "vllm:num_requests_waiting") >= self.queued))
            running = self.stack.engine_metric(self.engine, "vllm:num_requests_running")  # as the pause found it
            waiting = self.stack.engine_metric(self.engine, "vllm:num_requests_waiting")
            assert (running, waiting) == (runs, self.queued), \
                f"vLLM runs {running} and queues {waiting} where {runs} and {self.queued} are held: {self.told()}"
            self._wait(f"{runs} holders have their first token",
                       lambda: sum(s.is_set() for s in self.started) >= runs or not self._burst())
        except BaseException:
            self.__exit__()
            raise
        for i in (i for i in range(count) if self.started[i].is_set()):
            assert self.status[i] == 200, self.told()
            assert tp.REROUTE_HEADER not in self.headers[i], f"holder {i}: {self.headers[i][tp.REROUTE_HEADER]}"
        return self

    def waiting(self) -> list[int]:
        """The holders the engine has not started (no first token): with `queued`, those in its queue."""
        return [i for i, started in enumerate(self.started) if not started.is_set()]

    def burst(self) -> None:
        """The engine runs one burst and is paused again: what it did is read between its steps."""
        self._burst()

    def release(self) -> None:
        """Let the engine run again with the streams still open: they finish in the engine's own order."""
        self._resume()

    def __exit__(self, *_exc) -> None:
        self._resume()  # never left paused, whatever happened
        for response in self.responses:
            if response is not None:
                response.close()
        for thread in self.threads:
            thread.join(30)

    def still_held(self) -> None:
        """Called at the end of a probe: no holder ended while it ran (the engine was paused throughout)."""
        ended = [i for i, done in enumerate(self.done) if done.is_set()]
        assert not ended, f"holders {ended} ended while the engine was paused: {self.told()}"
