"""A client-side token bucket: at most ``qps`` requests a second, bursts of ``burst``."""

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._monotonic = monotonic
        self._sleep = sleep
        self._last = monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now

    def delay(self) -> float:
        """Seconds until a token is available (0 if one is available now); takes none."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self._qps

    async def acquire(self) -> None:
        async with self._lock:
            wait = self.delay()
            while wait > 0:
                await self._sleep(wait)
                wait = self.delay()
            self._tokens -= 1
