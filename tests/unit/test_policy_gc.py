"""The gateway's garbage collection on its event loop (tenantry/gateway/tenant_policy_gc.py), against the CPython
crash it avoids (python/cpython#148891): a weakref callback that sets a context variable while the collector runs
inside a `ContextVar.set` frees the mapping that set is copying. Both sides run in a child Python, the crash being
the process's death."""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tenantry.configs.litellm import PLUGIN_FILES
from tests.unit.policy_plugin import plugin

import tenant_policy_gc  # noqa: E402 - found through the folder the plugin added to sys.path

GATEWAY_DIR = Path(plugin.__file__).parent

CHURN = textwrap.dedent("""
    import asyncio, contextvars, gc, sys, weakref
    sys.path.append(sys.argv[1])
    import tenant_policy_gc

    target = contextvars.ContextVar("target")
    pads = [contextvars.ContextVar(f"pad{i}") for i in range(40)]
    collected = 0
    refs = []  # the weakrefs live until the collection after their round: their callbacks run then


    class Node:
        pass


    def callback(_ref):
        global collected
        collected += 1
        target.set(object())  # a variable of the same context, set while the collector runs


    def churn(rounds):
        for i in range(rounds):
            a, b = Node(), Node()
            a.b, b.a = b, a
            a.ref = weakref.ref(b, callback)
            refs.append(a.ref)
            del a, b
            pads[i % len(pads)].set(object())  # the copy allocates: an automatic collection may start inside it


    async def main(on_the_loop):
        for v in pads:
            v.set(object())
        if on_the_loop:
            tenant_policy_gc.LoopCollector(asyncio.get_running_loop(), interval=0).start()
        gc.set_threshold(1, 1, 1)  # every allocation may start the automatic collector, where it is on
        for _ in range(20):
            churn(1000)
            await asyncio.sleep(0)  # the loop runs its callbacks: the collection, where the gateway's is on
            await asyncio.sleep(0)
            refs.clear()
        print(collected)


    asyncio.run(main(sys.argv[2] == "loop"))
""")


def _churn(collector: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHURN, str(GATEWAY_DIR), collector], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython 3.12's collector no longer runs inside the copy")
def test_the_automatic_collector_crashes_a_context_variable_set_and_the_loops_collector_does_not():
    automatic = _churn("automatic")
    assert automatic.returncode == -signal.SIGSEGV, (automatic.returncode, automatic.stderr[-2000:])
    on_the_loop = _churn("loop")
    assert on_the_loop.returncode == 0, on_the_loop.stderr[-2000:]
    assert int(on_the_loop.stdout) > 0  # the cycles were collected, their callbacks run: on the loop, safely


def test_young_generations_are_collected_each_round_and_all_of_them_every_full_every_th():
    loop = asyncio.new_event_loop()
    try:
        collector = tenant_policy_gc.LoopCollector(loop, interval=3600, full_every=3)
        assert [collector.tick() for _ in range(6)] == [1, 1, 2, 1, 1, 2]
    finally:
        loop.close()


def test_outside_a_running_loop_install_leaves_the_collector_as_it_is():
    assert gc.isenabled()
    assert tenant_policy_gc.install() is None
    assert gc.isenabled()


def test_the_gateway_ships_the_module():
    assert "tenant_policy_gc.py" in PLUGIN_FILES and (GATEWAY_DIR / "tenant_policy_gc.py").is_file()

