"""The allocator's free memory goes back to the system (glibc malloc_trim); a TLS connection
holds a small read buffer, not asyncio's 256 KiB."""

import asyncio
import asyncio.sslproto
import ctypes
import datetime as dt
import ssl
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from trainerop_common.memory import MALLOC_TRIM, allocation_report, smaller_tls_buffers, trim
from trainerop_common.webhook_tls import issue, make_ca, write_pair


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


PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: many reads of the smaller buffer


async def tls_connections(tmp: Path, count: int) -> tuple[int, list[bytes]]:
    """Open ``count`` TLS connections to a local server that echoes PAYLOAD; returns the bytes
    traced as held while they are all open, and what each client received."""
    ca = make_ca(dt.datetime.now(dt.UTC))
    write_pair(issue(ca, ["127.0.0.1"], dt.datetime.now(dt.UTC)), tmp / "tls.crt", tmp / "tls.key")
    (tmp / "ca.crt").write_bytes(ca.cert)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
    client = ssl.create_default_context(cafile=str(tmp / "ca.crt"))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(PAYLOAD)
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    tracemalloc.start(1)
    try:
        before = tracemalloc.get_traced_memory()[0]
        opened = [await asyncio.open_connection("127.0.0.1", port, ssl=client) for _ in range(count)]
        received = [await reader.readexactly(len(PAYLOAD)) for reader, _ in opened]
        held = tracemalloc.get_traced_memory()[0] - before - sum(len(r) for r in received)
    finally:
        tracemalloc.stop()
    for _, writer in opened:
        writer.close()
        await writer.wait_closed()
    server.close()
    await server.wait_closed()
    return held, received


async def test_a_tls_connection_holds_a_small_read_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ends of 10 connections (a controller's pooled API connections, the API server's to its
    webhooks): asyncio's own buffers would hold 5 MiB; data still arrives whole."""
    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size", asyncio.sslproto.SSLProtocol.max_size)
    smaller_tls_buffers()
    held, received = await tls_connections(tmp_path, 10)
    assert all(r == PAYLOAD for r in received)
    assert held < 20 * 128 * 1024  # 20 ends: at 256 KiB each they would hold 5 MiB


def test_no_controller_loads_cryptography_unless_it_issues_its_own_certificate() -> None:
    """The webhooks' certificate comes from cert-manager by default: the ``cryptography`` package
    (10 MiB resident in every process that loads it) is imported only by --webhook-tls self-signed,
    and by the verify controller once it reads a policy's key."""
    controllers = ("trainer", "profile", "checkpoint", "quota", "audit", "kubeflow", "verify")
    imports = [f"import trainerop_{c}.controller" for c in controllers]
    script = "\n".join([*imports, "import sys", "print('cryptography' in sys.modules)"])
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == ["False"]
    with_tls = subprocess.run(
        [sys.executable, "-c", "import sys, trainerop_common.webhook_tls; print('cryptography' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert with_tls.split() == ["True"]
    key = (
        "from trainerop_common.signatures import load_key, PublicKeyError\n"
        "try:\n    load_key('k', b'x')\nexcept PublicKeyError:\n    pass"
    )
    reading = subprocess.run(
        [sys.executable, "-c", f"import sys\n{key}\nprint('cryptography' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert reading.split() == ["True"]
