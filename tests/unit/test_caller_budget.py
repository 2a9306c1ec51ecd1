"""What one caller of the webhook server may have in flight (trainerop_common.caller_budget)."""

import pytest

from trainerop_common.caller_budget import CallerBudget

KIB = 1024


@pytest.mark.parametrize(
    ("in_flight", "size", "fits"),
    [
        ([], 16 * 1024 * KIB, True),  # a caller's first review always fits (the server caps its size)
        ([8 * 1024 * KIB], 8 * 1024 * KIB, True),  # up to the bytes
        ([8 * 1024 * KIB], 8 * 1024 * KIB + 1, False),  # one byte over
        ([4 * KIB] * 3, 4 * KIB, True),  # up to the count
        ([4 * KIB] * 4, 4 * KIB, False),  # one review over
    ],
)
def test_a_caller_may_hold_so_many_reviews_and_bytes_at_once(in_flight: list[int], size: int, fits: bool) -> None:
    budget = CallerBudget(reviews=4, size=16 * 1024 * KIB)
    assert all(budget.take("10.88.0.7", held) for held in in_flight)
    assert budget.take("10.88.0.7", size) is fits


def test_each_caller_spends_its_own_budget_and_gets_it_back() -> None:
    budget = CallerBudget(reviews=1, size=KIB)
    assert budget.take("attacker", KIB)
    assert not budget.take("attacker", 1)
    assert budget.take("api-server", KIB)  # the flood does not spend the API server's budget
    budget.give_back("attacker", KIB)
    assert budget.take("attacker", KIB)
    budget.give_back("attacker", KIB)
    budget.give_back("api-server", KIB)
    assert budget.held == {}
