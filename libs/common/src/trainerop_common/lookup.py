"""A slow lookup (an API read a reconcile needs but cannot watch) with its answers trusted for a
while, so a burst of reconciles costs one request per key, not one per reconcile: concurrent
askers of the same key share one request in flight."""

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from .clock import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
MAX_KEYS = 4096  # beyond this, stale answers are forgotten so the map cannot grow without bound


class CachedLookup(Generic[K, V]):
    def __init__(
        self,
        fetch: Callable[[K], Awaitable[V]],
        ttl: float,
        clock: Clock,
        ttl_for: Callable[[V], float] | None = None,
    ) -> None:
        """``ttl_for``: how long an answer is trusted, by answer, where not ``ttl`` (an answer that
        says the lookup could not be made yet is looked at again sooner)."""
        self._fetch = fetch
        self._ttl = ttl
        self._ttl_for = ttl_for
        self._clock = clock
        self._seen: dict[K, tuple[V, float]] = {}
        self._asking: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K) -> V:
        known = self._seen.get(key)
        if known is not None and self._clock.now().timestamp() - known[1] < self._trusted_for(known[0]):
            return known[0]
        if key not in self._asking:
            self._asking[key] = asyncio.ensure_future(self._ask(key))
            self._asking[key].add_done_callback(lambda _: self._asking.pop(key, None))
        return await asyncio.shield(self._asking[key])

    def _trusted_for(self, value: V) -> float:
        return self._ttl if self._ttl_for is None else self._ttl_for(value)

    async def _ask(self, key: K) -> V:
        value = await self._fetch(key)
        now = self._clock.now().timestamp()
        if len(self._seen) > MAX_KEYS:
            self._seen = {k: v for k, v in self._seen.items() if now - v[1] < self._trusted_for(v[0])}
        self._seen[key] = (value, now)
        return value
