"""The allocator's free memory goes back to the system (glibc malloc_trim)."""

import ctypes
import tracemalloc

import pytest

from trainerop_common.memory import MALLOC_TRIM, allocation_report, trim


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


HELD: list[bytes] = []


def hold_many_blocks() -> None:  # the allocation site the report must name
    HELD.extend(bytes(1000) + bytes([i % 256]) for i in range(20_000))


def test_the_memory_report_names_the_sites_holding_the_most() -> None:
    """With Python's allocations traced (PYTHONTRACEMALLOC), ``/debug/memory`` names the line that
    holds the most, first; without tracing there is no report (the endpoint says how to get one)."""
    assert not tracemalloc.is_tracing()
    assert allocation_report() is None
    tracemalloc.start(1)
    try:
        hold_many_blocks()
        report = allocation_report(top=3)
    finally:
        tracemalloc.stop()
        HELD.clear()
    assert report is not None
    first_site = report.splitlines()[1]
    assert "test_memory.py" in first_site
    assert int(first_site.split("KiB")[1].split()[0]) >= 20_000  # the blocks held there
