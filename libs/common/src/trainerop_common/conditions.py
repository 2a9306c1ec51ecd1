"""Condition helpers: a list-map keyed by type, observedGeneration, stable lastTransitionTime.

Everything here is pure. A controller states the conditions it wants (:class:`Desired`), and
:func:`merge` turns them into the entries to write, keeping ``lastTransitionTime`` unless the
status flipped.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .api.base import Condition, ConditionStatus


@dataclass(frozen=True)
class Desired:
    """What a controller wants one condition to say."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""

    @classmethod
    def true(cls, type_: str, reason: str, message: str = "") -> "Desired":
        return cls(type_, "True", reason, message)

    @classmethod
    def false(cls, type_: str, reason: str, message: str = "") -> "Desired":
        return cls(type_, "False", reason, message)


def parse(raw: Iterable[Mapping[str, Any]] | None) -> list[Condition]:
    """Conditions from an object's status (malformed entries are dropped)."""
    out = []
    for item in raw or ():
        try:
            out.append(Condition.model_validate(item))
        except ValueError:
            continue
    return out


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def merge(current: Sequence[Condition], desired: Iterable[Desired], generation: int, now: str) -> list[Condition]:
    """The conditions to write for ``desired``; ``lastTransitionTime`` moves only on a flip."""
    out = []
    for want in desired:
        old = find(current, want.type)
        since = old.last_transition_time if old is not None and old.status == want.status else now
        out.append(
            Condition(
                type=want.type,
                status=want.status,
                reason=want.reason,
                message=want.message,
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return out


def is_true_for(conditions: Sequence[Condition], type_: str, generation: int) -> bool:
    """True when the condition is True and was computed for ``generation`` (a gate is open)."""
    cond = find(conditions, type_)
    return cond is not None and cond.status == "True" and cond.observed_generation == generation
