from trainerop_common.ratelimit import TokenBucket


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_bursts_then_paces_requests() -> None:
    clock = FakeTime()
    bucket = TokenBucket(qps=10, burst=3, monotonic=clock.monotonic, sleep=clock.sleep)
    for _ in range(3):
        await bucket.acquire()
    assert clock.slept == []
    await bucket.acquire()
    assert abs(sum(clock.slept) - 0.1) < 1e-9
    clock.now += 10  # idle time refills up to the burst, not beyond
    assert bucket.delay() == 0
    for _ in range(3):
        await bucket.acquire()
    assert bucket.delay() > 0
