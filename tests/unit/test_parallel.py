"""A reconcile's independent requests together: at most the bound in flight, results in order,
every call run to its end before the first error is raised."""

import asyncio

import pytest

from trainerop_common.parallel import bounded


async def test_at_most_the_bound_in_flight_and_results_in_order() -> None:
    in_flight, most = 0, 0

    async def call(i: int) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.001 * (5 - i % 5))  # later calls finish first
        in_flight -= 1
        return i

    assert await bounded((call(i) for i in range(20)), limit=4) == list(range(20))
    assert most == 4


async def test_every_call_ends_before_the_first_error_is_raised() -> None:
    done: list[int] = []

    async def call(i: int) -> int:
        await asyncio.sleep(0.001 * i)
        if i == 1:
            raise OSError("refused")
        done.append(i)
        return i

    with pytest.raises(OSError, match="refused"):
        await bounded(call(i) for i in range(5))
    assert sorted(done) == [0, 2, 3, 4]  # a failed delete does not leave the others half-done
