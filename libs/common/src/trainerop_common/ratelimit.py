"""A client-side token bucket: at most ``qps`` requests a second, bursts of ``burst``; urgent
requests (a failed run's recovery) go ahead of the others waiting."""

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

    def delay(self, floor: float = 0.0) -> float:
        """Seconds until a token can be taken leaving at least ``floor`` (0 if now); takes none."""
        self._refill()
        short = floor + 1 - self._tokens
        return 0.0 if short <= 0 else short / self._qps

    async def acquire(self, urgent: bool = False) -> None:
        """Take a token, waiting for one in turn. An urgent request does not queue: it may borrow
        up to ``burst`` tokens ahead, which the requests waiting then wait out; so a failed pod's
        replacement is not sent after a ramp's thousands of creates, and over time the rate
        still stays within ``qps`` (plus one burst)."""
        if urgent:
            while (wait := self.delay(floor=-self._burst)) > 0:
                await self._sleep(wait)
            self._tokens -= 1
            return
        async with self._lock:
            wait = self.delay()
            while wait > 0:
                await self._sleep(wait)
                wait = self.delay()
            self._tokens -= 1
