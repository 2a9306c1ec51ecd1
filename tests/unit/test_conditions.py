import pytest

from trainerop_common.api.base import Condition
from trainerop_common.conditions import Desired, find, is_true_for, merge, parse

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def cond(status: str, reason: str = "R", since: str = T0, generation: int = 1) -> Condition:
    return Condition(
        type="Ready",
        status=status,
        reason=reason,
        last_transition_time=since,
        observed_generation=generation,
    )


@pytest.mark.parametrize(
    ("current", "desired", "since"),
    [
        ([], Desired.true("Ready", "R"), T1),  # new condition: now
        ([cond("True")], Desired.true("Ready", "Other", "msg"), T0),  # same status, new reason: kept
        ([cond("True")], Desired.false("Ready", "R"), T1),  # flip: now
        ([cond("Unknown")], Desired.true("Ready", "R"), T1),
    ],
)
def test_last_transition_time_moves_only_on_a_flip(current: list[Condition], desired: Desired, since: str) -> None:
    (merged,) = merge(current, [desired], generation=2, now=T1)
    assert merged.last_transition_time == since
    assert merged.observed_generation == 2
    assert (merged.status, merged.reason, merged.message) == (desired.status, desired.reason, desired.message)


def test_gate_is_open_only_for_the_current_generation() -> None:
    conditions = [cond("True", generation=3)]
    assert is_true_for(conditions, "Ready", 3)
    assert not is_true_for(conditions, "Ready", 4)
    assert not is_true_for([cond("False", generation=3)], "Ready", 3)
    assert not is_true_for([], "Ready", 3)


def test_parse_drops_malformed_entries() -> None:
    parsed = parse([{"type": "A", "status": "True", "reason": "R", "lastTransitionTime": T0}, {"type": "B"}])
    assert [c.type for c in parsed] == ["A"]
    assert find(parsed, "B") is None
