"""Host memory allocation for the training loop: keep freed blocks in the process.

PyTorch allocates CPU tensors with the C library's ``malloc``. glibc serves a request
above its mmap threshold (128 KiB at first, raised dynamically up to 32 MiB) with a
fresh ``mmap`` and gives the pages back to the kernel on ``free``; the next step then
page-faults its way through the same amount again, and the kernel zero-fills every
page. A stacked step allocates a few dozen activations of 0.1-2 MB each, so on the
UCI stack (20 splits x 5 members, batch 64) and the toy network (50 particles) half of
a step was spent in page faults: measured with ``getrusage`` on the toy DE step,
901 minor faults and 1.4 ms of system time a step before, 1 fault and 0 ms after
(``benchmarks/bench_engine.py`` compares both). Raising the mmap threshold to its
ceiling and never trimming the heap top keeps freed activations in the process for
the next step.

The threshold's ceiling is 32 MiB, and an activation above it was still mmapped: the
protein stack (5 splits x 5 members x batch 8192 x 100 hidden) has 82 MB activations,
page-faulted in again every step; with mmap switched off (``M_MMAP_MAX = 0``: every block
comes from the heap, which is never trimmed) the engine before this work ran that stack
1.4x faster (``benchmarks/bench_engine.py --configs protein --baseline-malloc``: 38 -> 53
splits x steps/s). So mmap is switched off altogether. Nothing numerical changes; the resident size stays at the
high-water mark of one step (plus whatever fragmentation the heap keeps).

PyTorch aligns CPU blocks to 64 bytes (``posix_memalign``), and glibc then grows the heap
over the first few allocations of a size before a freed block fits the next one (measured:
a 41 MB block faulted in about 1,700 pages an allocation over its first 10, none after
30); a call of training steps may still grow the heap once in a while for fragmentation,
so the steady state, not every call, is free of page faults (``tests/test_host_memory.py``).

Only glibc has ``mallopt``; elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

__all__ = ["keep_freed_memory"]

log = logging.getLogger("repens.host_memory")

# glibc <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
#: glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); larger
#: requests would still be mmapped, hence M_MMAP_MAX = 0 as well
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
_TRIM_THRESHOLD = 1 << 30

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks for reuse, of any size (once per process).

    Returns whether the C library took the setting (``False`` off glibc)."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = (
        bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX))
        and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
        and bool(mallopt(_M_MMAP_MAX, 0))
    )
    log.debug("malloc keeps freed blocks up to %d bytes: %s", _MMAP_THRESHOLD_MAX, _done)
    return _done
