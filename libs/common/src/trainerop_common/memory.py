"""Giving the C allocator's free memory back to the system (glibc ``malloc_trim``).

A burst of watch events (a thousand Trainers starting) allocates and frees a lot; glibc keeps
the freed heap pages for reuse, so a controller's resident memory stays at the burst's peak.
``malloc_trim(0)`` returns every free page: measured at 1000 Trainers, the trainer controller
went from 155 to 130 MiB (docs/design/performance.md). Elsewhere than glibc it does nothing.

asyncio gives every TLS connection a read buffer of 256 KiB for as long as it lives (the API
client's pooled connections, kopf's watches, the API server's connections to the webhooks): at
N = 1000 the trainer held 81 of them, 20.7 MiB, the largest allocation site traced. Each controller
sets it to :data:`TLS_READ_BUFFER` before its loop starts (:func:`smaller_tls_buffers`).

What holds the memory: a controller started with ``PYTHONTRACEMALLOC=N`` (Python's own allocation
tracing, N frames per allocation) answers ``/debug/memory`` on its metrics port with the largest
allocation sites (:func:`allocation_report`).
"""

import asyncio.sslproto
import ctypes
import logging
import tracemalloc
from collections.abc import Callable

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)
    return trim


MALLOC_TRIM = _malloc_trim()
# A TLS connection's read buffer (asyncio's is 256 KiB): a watch event or an API answer arrives in
# reads of up to this much, each handed on as it comes, so a larger one only costs memory.
TLS_READ_BUFFER = 32 * 1024


def smaller_tls_buffers(size: int = TLS_READ_BUFFER) -> None:
    """Give TLS connections opened from now on a read buffer of ``size`` bytes (asyncio reads the
    buffer size from its protocol class: ``SSLProtocol.max_size``)."""
    asyncio.sslproto.SSLProtocol.max_size = size


def trim() -> bool:
    """Return the allocator's free pages to the system; whether there is an allocator to ask."""
    if MALLOC_TRIM is None:
        return False
    MALLOC_TRIM(0)
    return True


async def trim_periodically() -> None:
    """One pass of the runtime's periodic job (``--trim-memory-seconds``)."""
    if not trim():
        log.debug("no glibc malloc_trim here: nothing to return")


NOT_TRACING = "not tracing: start the controller with PYTHONTRACEMALLOC=1 (or more frames) to see what holds memory\n"


def allocation_report(top: int = 40) -> str | None:
    """The ``top`` allocation sites holding the most memory now, largest first, with the total
    traced (None when Python does not trace its allocations)."""
    if not tracemalloc.is_tracing():
        return None
    snapshot = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    frames = tracemalloc.get_traceback_limit()
    stats = snapshot.statistics("traceback" if frames > 1 else "lineno")
    total = sum(s.size for s in stats)
    lines = [f"traced {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks; the top {top} sites:"]
    for stat in stats[:top]:
        where = " <- ".join(f"{f.filename}:{f.lineno}" for f in stat.traceback)
        lines.append(f"{stat.size / 2**10:10.1f} KiB {stat.count:8d} blocks  {where}")
    return "\n".join(lines) + "\n"
