"""The controller's own event loop, and a thread with a loop of its own for the admission webhooks
(docs/design/performance.md, "Admission off the controller's loop"): a review waits behind no
backlog of reconciles, only for the interpreter's lock (a few milliseconds at a time).

What runs on the admission loop reads the controller's state only as snapshots (a dict's values
copied in one call, which the interpreter's lock makes atomic) and does its own I/O with a client
of its own; whatever must act through the controller's state is handed to the home loop
(:func:`at_home`)."""

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

log = logging.getLogger("trainerop.loops")
T = TypeVar("T")
STOP_SECONDS = 10.0  # a stopping admission loop's tasks get this long to finish their cleanup
# Set while a review is answered on the admission loop: the controller's own loop.
HOME: ContextVar[asyncio.AbstractEventLoop | None] = ContextVar("trainerop_home_loop", default=None)


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` run on ``loop`` (another thread's); cancelling the wait cancels it there."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


async def at_home(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``make()`` awaited on the controller's own loop: directly when already there, handed over
    from the admission loop (its I/O clients and locks belong to the home loop)."""
    home = HOME.get()
    if home is None or home is asyncio.get_running_loop():
        return await make()
    return await on_loop(home, make())


class LoopThread:
    """An event loop running in a daemon thread of its own until :meth:`stop`, which cancels what
    still runs on it and waits for that to end (their ``finally`` blocks run on this loop)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` on this loop; it ends when it returns or when the loop stops."""
        asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def stop(self) -> None:
        """Stop the loop (from another loop) and wait for its thread to end."""
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, STOP_SECONDS)
        if self._thread.is_alive():
            log.warning("the %s thread did not stop within %.0f s", self._thread.name, STOP_SECONDS)
