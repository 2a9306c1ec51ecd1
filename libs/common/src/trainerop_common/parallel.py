"""Independent API requests of one reconcile issued together, with a bound (the client's rate
limit still paces them)."""

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")

# Requests of one reconcile in flight at once: a gang's pods are created and deleted together.
PARALLEL_REQUESTS = 16


async def bounded(calls: Iterable[Awaitable[T]], limit: int = PARALLEL_REQUESTS) -> list[T]:
    """Await ``calls`` concurrently, at most ``limit`` at a time; results in order. Every call
    runs to its end; the first error, if any, is raised after all have."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if not isinstance(r, BaseException)]
