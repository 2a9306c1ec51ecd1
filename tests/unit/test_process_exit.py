"""A controller whose kopf does not finish stopping exits, so that the kubelet starts it again
(trainerop_common.process.exit_when_stuck)."""

import asyncio

import pytest

from trainerop_common.process import EXIT_AFTER_CLEANUP_SECONDS, STOP_GRACE_SECONDS, exit_when_stuck


async def test_a_process_still_stopping_after_kopfs_cleanup_exits_with_code_1() -> None:
    cleaned_up = asyncio.Event()
    codes: list[int] = []
    cleaned_up.set()
    await exit_when_stuck(cleaned_up, 0, codes.append)
    assert codes == [1]


async def test_a_running_process_is_left_alone() -> None:
    codes: list[int] = []
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(exit_when_stuck(asyncio.Event(), 0, codes.append), timeout=0.1)
    assert codes == []


def test_the_orderly_stop_has_time_to_finish_first() -> None:
    assert EXIT_AFTER_CLEANUP_SECONDS > 2 * STOP_GRACE_SECONDS
