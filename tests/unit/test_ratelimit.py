import asyncio

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
        await asyncio.sleep(0)  # as a real sleep, others run meanwhile


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


async def test_an_urgent_request_goes_ahead_of_those_waiting_and_they_wait_it_out() -> None:
    clock = FakeTime()
    bucket = TokenBucket(qps=10, burst=2, monotonic=clock.monotonic, sleep=clock.sleep)
    for _ in range(2):
        await bucket.acquire()  # the burst is spent: an ordinary request now waits 0.1 s
    await bucket.acquire(urgent=True)
    await bucket.acquire(urgent=True)
    assert clock.slept == []  # borrowed: no wait
    assert abs(bucket.delay() - 0.3) < 1e-9  # the next ordinary one waits for what was borrowed
    await bucket.acquire(urgent=True)  # a third would owe more than a burst: it waits too
    assert abs(sum(clock.slept) - 0.1) < 1e-9


async def test_an_urgent_request_is_not_held_by_ordinary_ones_queued_before_it() -> None:
    clock = FakeTime()
    bucket = TokenBucket(qps=1, burst=1, monotonic=clock.monotonic, sleep=clock.sleep)
    order: list[str] = []

    async def ordinary(n: int) -> None:
        await bucket.acquire()
        order.append(f"ordinary {n}")

    async def urgent() -> None:
        await bucket.acquire(urgent=True)
        order.append("urgent")

    await bucket.acquire()  # spent
    queued = [asyncio.create_task(ordinary(n)) for n in range(3)]
    await asyncio.sleep(0)  # they hold the queue
    await urgent()
    await asyncio.gather(*queued)
    assert order[0] == "urgent"
