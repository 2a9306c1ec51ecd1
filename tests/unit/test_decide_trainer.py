from collections.abc import Sequence

import pytest

from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import TrainerSpec
from trainerop_trainer.decide import Observed, decide

SPEC = TrainerSpec.model_validate({"epochs": 1, "image": "img"})
GATES = ("ProfileResolved", "QuotaAdmitted")


def cond(type_: str, status: str, reason: str = "R", generation: int = 2, message: str = "") -> Condition:
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time="2026-01-01T00:00:00Z",
        observed_generation=generation,
    )


@pytest.mark.parametrize(
    ("conditions", "gates", "reason", "message_parts"),
    [
        ([], (), "GatesOpen", ["all gates are open"]),
        (
            [],
            GATES,
            "WaitingForGates",
            ["ProfileResolved (not yet reported for generation 2)", "QuotaAdmitted (not yet reported"],
        ),
        ([cond("ProfileResolved", "True"), cond("QuotaAdmitted", "True")], GATES, "GatesOpen", []),
        (
            [cond("ProfileResolved", "True", generation=1), cond("QuotaAdmitted", "True")],
            GATES,
            "WaitingForGates",
            ["ProfileResolved (not yet reported for generation 2)"],
        ),
        (
            [cond("ProfileResolved", "False", "ProfileNotFound", message="create it"), cond("QuotaAdmitted", "True")],
            GATES,
            "WaitingForGates",
            ["ProfileResolved (ProfileNotFound: create it)"],
        ),
        (
            [cond("QuotaAdmitted", "False", "ExceedsQuota")],
            ("QuotaAdmitted",),
            "WaitingForGates",
            ["QuotaAdmitted (ExceedsQuota)"],
        ),
    ],
)
def test_gate(conditions: Sequence[Condition], gates: Sequence[str], reason: str, message_parts: list[str]) -> None:
    d = decide(Observed("t", 2, SPEC, conditions, gates))
    created = next(c for c in d.conditions if c.type == "Created")
    assert created.status == "False"
    assert created.reason == reason
    for part in message_parts:
        assert part in created.message
    assert d.status["phase"] == "Pending"
    assert d.status["topology"]["selector"] == "trainer-name=t,trainer.operator.kubeflow.org/replica-type=worker"


def test_suspended_trainer_waits_for_nothing() -> None:
    spec = TrainerSpec.model_validate({"epochs": 1, "image": "img", "runPolicy": {"suspend": True}})
    d = decide(Observed("t", 1, spec, [], GATES))
    assert d.status["phase"] == "Suspended"
    by_type = {c.type: c for c in d.conditions}
    assert by_type["Suspended"].status == "True"
    assert by_type["Created"].reason == "Suspended"
