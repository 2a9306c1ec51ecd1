"""Checkpoints on S3, read and deleted by the controller itself with the Trainer's credentials, in
worker threads (the event loop never blocks on storage)."""

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import datetime

from trainerop_common.checkpoint_storage import Location, S3Error, open_location
from trainerop_common.clock import Clock
from trainerop_common.tracing import record_span

from .decide import Collect, Copy, CopyId, CopyState, copy_state, stored_copy_state
from .metrics import VERIFIED, VERIFY_SECONDS

PARALLEL_READS = 4
log = logging.getLogger("trainerop.checkpoint")


def check_copy(location: Location, copy: Copy) -> tuple[CopyState, str]:
    """Blocking: the copy against what its writer reported, from the checksum its storage kept
    where that answers, else read and hashed; and which it was ("stored" or "read"). A storage
    error is a state too ("unreadable", read again later): it must not stop the rest of the
    reconcile."""
    t0 = time.monotonic()
    try:
        state = stored_copy_state(location.stored_checksum(copy.key), copy)
        source = "stored" if state is not None else "read"
        if state is None:
            state = copy_state(location.sha256(copy.key), copy.sha256, copy.size)
    except (S3Error, OSError) as err:
        log.warning("reading %s/%s failed: %s", copy.path, copy.key, err)
        return "unreadable", "read"
    VERIFY_SECONDS.observe(time.monotonic() - t0)
    return state, source


class ObjectStore:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._reads = asyncio.Semaphore(PARALLEL_READS)

    async def read(self, copies: Iterable[Copy], env: Mapping[str, str]) -> dict[CopyId, CopyState]:
        """What reading each copy found (a few at a time)."""

        async def one(copy: Copy) -> tuple[CopyId, CopyState]:
            async with self._reads:
                state, source = await asyncio.to_thread(check_copy, open_location(copy.path, env), copy)
            VERIFIED.labels(state, source).inc()
            return copy.id, state

        return dict(await asyncio.gather(*(one(c) for c in copies)))

    async def delete(self, items: Iterable[Collect], env: Mapping[str, str]) -> set[str]:
        """Delete the checkpoints' data; the paths whose data is gone (the rest is tried again)."""
        gone = set()
        for item in items:
            t0: datetime = self._clock.now()
            try:
                await asyncio.to_thread(open_location(item.path, env).delete_all)
            except (S3Error, OSError) as err:
                log.warning("deleting %s failed, retrying: %s", item.path, err)
                continue
            gone.add(item.path)
            record_span("checkpoint.collect", t0, self._clock.now(), {"checkpoint.name": item.checkpoint})
        return gone
