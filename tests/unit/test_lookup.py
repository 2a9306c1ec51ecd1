"""A cached lookup: one request per key per TTL, shared by concurrent askers."""

import asyncio
from datetime import UTC, datetime, timedelta

from trainerop_common.lookup import CachedLookup


class Clock:
    def __init__(self) -> None:
        self.moment = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.moment


async def test_concurrent_askers_share_one_request_and_the_answer_is_trusted_for_the_ttl() -> None:
    asked: list[str] = []
    gate = asyncio.Event()

    async def fetch(key: str) -> str:
        asked.append(key)
        await gate.wait()
        return f"value of {key}"

    clock = Clock()
    lookup: CachedLookup[str, str] = CachedLookup(fetch, 10, clock)
    waiting = [asyncio.ensure_future(lookup.get("a")) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    assert set(await asyncio.gather(*waiting)) == {"value of a"}
    assert asked == ["a"]
    clock.moment += timedelta(seconds=9)
    await lookup.get("a")
    assert asked == ["a"]
    clock.moment += timedelta(seconds=2)
    await lookup.get("a")
    assert asked == ["a", "a"]


async def test_an_answer_can_be_trusted_for_less_by_what_it_says() -> None:
    """A lookup that could not be made yet (None here) is asked again sooner than an answer."""
    asked: list[str] = []
    answers = {"a": None, "b": "found"}

    async def fetch(key: str) -> str | None:
        asked.append(key)
        return answers[key]

    clock = Clock()
    lookup: CachedLookup[str, str | None] = CachedLookup(
        fetch, 30, clock, ttl_for=lambda found: 30 if found is not None else 1
    )
    await lookup.get("a")
    await lookup.get("b")
    clock.moment += timedelta(seconds=2)
    await lookup.get("a")
    await lookup.get("b")
    assert asked == ["a", "b", "a"]
