"""The gateway's cyclic garbage collection, run only where CPython 3.11 survives it.

Before 3.12, CPython can free a context's variables while `ContextVar.set` is still copying them: the copy
allocates, an allocation may start the cyclic collector, and a finaliser or weakref callback the collector runs
sets a variable of the same context, replacing (and freeing) the mapping the outer set is walking
(python/cpython#148891; 3.12's collector no longer runs there, and 3.11 gets security fixes only). LiteLLM's
error paths leave such finalisers behind (coroutines closed by the collector leave `service_target` blocks), and
the local gateway died of it three times in a day of runs, in `service_target`'s `ContextVar.set`, after database
and Redis outages (docs/decisions.md: The gateway's segfault was CPython's).

So the gateway turns the automatic collector off and collects from a callback of its own event loop, a point at
which no `ContextVar.set` is under way: the collector's work is the same, only where it runs changes. Young objects
every half second, everything once a minute; what survived start-up is frozen first, so a full collection walks
only what was made since.
"""

# No `from __future__ import annotations`: loaded by path beside the plugin.
import asyncio
import gc
import logging
import sys

YOUNG_EVERY_SECONDS = 0.5
"""How often generations 0 and 1 are collected: CPython's own thresholds (700 allocations) would run them far
more often under load, but garbage only waits, it is not lost."""
FULL_EVERY = 120
"""Young collections between two full ones: a minute."""
AFFECTED = sys.version_info < (3, 12)

log = logging.getLogger("tenantry")


class LoopCollector:
    """Collects on `loop`, from `call_later` callbacks, never from an allocation."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float = YOUNG_EVERY_SECONDS,
                 full_every: int = FULL_EVERY) -> None:
        self.loop, self.interval, self.full_every = loop, interval, full_every
        self.rounds = 0

    def start(self) -> None:
        gc.disable()
        gc.collect()
        gc.freeze()  # start-up's long-lived objects: a full collection no longer walks them
        self._schedule()

    def tick(self) -> int:
        """One collection: the youngest two generations, every `full_every`-th round all three."""
        self.rounds += 1
        generation = 2 if self.rounds % self.full_every == 0 else 1
        gc.collect(generation)
        self._schedule()
        return generation

    def _schedule(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_later(self.interval, self.tick)


_collector = None


def install() -> "LoopCollector | None":
    """On the gateway's running loop, once, where CPython needs it (the plugin's instance is made as LiteLLM
    loads its config, inside the server's loop)."""
    global _collector
    if _collector is not None or not AFFECTED:
        return _collector
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        log.warning("tenantry: no running event loop as the plugin loads; the cyclic collector runs as CPython "
                    "schedules it (python/cpython#148891 can crash the gateway)")
        return None
    _collector = LoopCollector(loop)
    _collector.start()
    log.warning("tenantry: cyclic garbage is collected on the event loop every %ss (CPython %d.%d, "
                "python/cpython#148891)", YOUNG_EVERY_SECONDS, *sys.version_info[:2])
    return _collector
