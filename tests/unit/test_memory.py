"""The allocator's free memory goes back to the system (glibc malloc_trim)."""

import ctypes

import pytest

from trainerop_common.memory import MALLOC_TRIM, trim


def resident_mib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(MALLOC_TRIM is None, reason="not glibc: there is no malloc_trim to call (CI runs on glibc)")
def test_memory_freed_after_a_burst_goes_back_to_the_system() -> None:
    """100 MiB in small blocks, freed under one block still held: glibc keeps the pages (the
    burst's peak stays resident) until trimmed."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(1024) for _ in range(100_000)]
    for block in blocks:
        ctypes.memset(block, 1, 1024)
    held = libc.malloc(1024)  # above the freed ones: the heap's top cannot shrink by itself
    for block in blocks:
        libc.free(block)
    before = resident_mib()
    assert trim()
    assert before - resident_mib() >= 50
    libc.free(held)
