"""The wait for a Secret grant: a controller forbidden to read a new Trainer's Secret looks again
for a while (the trainer controller binds the ClusterRole in that namespace at the same moment),
then says it could not read it."""

import pytest

from trainerop_common.contracts import GRANT_WAIT_SECONDS, awaiting_grant


@pytest.mark.parametrize(
    ("forbidden", "age", "waits"),
    [
        (True, 0.0, True),  # the first Trainer of a namespace: the binding is being made
        (True, GRANT_WAIT_SECONDS - 0.5, True),
        (True, GRANT_WAIT_SECONDS, False),  # long enough: the controller says it may not read it
        (True, None, False),  # no creation time: nothing to wait by
        (False, 0.0, False),  # readable (or missing): answered at once
    ],
)
def test_a_forbidden_secret_of_a_young_trainer_is_looked_at_again(
    forbidden: bool, age: float | None, waits: bool
) -> None:
    assert awaiting_grant(forbidden, age) is waits
