"""Independent API requests of one reconcile issued together, with a bound (the client's rate
limit still paces them)."""

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")

# Requests of one reconcile in flight at once: a gang's pods are created and deleted together.
PARALLEL_REQUESTS = 16


async def settled(calls: Iterable[Awaitable[T]], limit: int = PARALLEL_REQUESTS) -> list[T | Exception]:
    """Await ``calls`` concurrently, at most ``limit`` at a time; each one's result or error, in
    order (every call runs to its end)."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    out: list[T | Exception] = []
    for result in await asyncio.gather(*(one(c) for c in calls), return_exceptions=True):
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result  # a cancellation is not a call's outcome
        out.append(result)
    return out


def first_error(results: Iterable[T | Exception]) -> None:
    """Raise the first error of ``settled`` results, if any."""
    for result in results:
        if isinstance(result, Exception):
            raise result


async def bounded(calls: Iterable[Awaitable[T]], limit: int = PARALLEL_REQUESTS) -> list[T]:
    """Await ``calls`` concurrently, at most ``limit`` at a time; results in order. Every call
    runs to its end; the first error, if any, is raised after all have."""
    results = await settled(calls, limit)
    first_error(results)
    return [r for r in results if not isinstance(r, Exception)]
