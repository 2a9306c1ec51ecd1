"""Giving the C allocator's free memory back to the system (glibc ``malloc_trim``).

A burst of watch events (a thousand Trainers starting) allocates and frees a lot; glibc keeps
the freed heap pages for reuse, so a controller's resident memory stays at the burst's peak.
``malloc_trim(0)`` returns every free page: measured at 1000 Trainers, the trainer controller
went from 155 to 130 MiB (docs/design/performance.md). Elsewhere than glibc it does nothing.
"""

import ctypes
import logging
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
