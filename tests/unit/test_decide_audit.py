from dataclasses import replace

from trainerop_audit.decide import TrainerFacts, creator_of, decide
from trainerop_common.api.base import Condition

FACTS = TrainerFacts("ns", "llama", "0123456789abcdef", 1, "kubectl-client-side-apply", "2026-01-01T00:00:00Z")


def test_a_new_trainer_gets_its_creation_record() -> None:
    d = decide(FACTS, [])
    (record,) = d.create
    assert record["metadata"]["name"] == "llama-created-01234567"
    assert record["spec"]["action"] == "Created"
    assert record["spec"]["actor"] == "kubectl-client-side-apply"
    assert "ownerReferences" not in record["metadata"], "the trail must outlive the Trainer"
    assert d.status == {"audit": {"records": 1, "lastRecord": "llama-created-01234567"}}


def test_existing_records_are_not_written_again_and_are_counted() -> None:
    existing = decide(FACTS, []).create[0]
    d = decide(FACTS, [existing])
    assert d.create == ()
    assert d.status == {"audit": {"records": 1, "lastRecord": "llama-created-01234567"}}


def test_records_of_an_earlier_trainer_with_the_same_name_do_not_count() -> None:
    earlier = decide(TrainerFacts("ns", "llama", "ffff", 1, "x", "2025-01-01T00:00:00Z"), []).create[0]
    d = decide(FACTS, [earlier])
    assert len(d.create) == 1
    assert d.status["audit"]["records"] == 1


def test_creator_is_the_first_spec_manager() -> None:
    fields = [
        {"manager": "kubectl-client-side-apply", "operation": "Update"},
        {"manager": "trainer-operator/trainer", "operation": "Apply", "subresource": "status"},
    ]
    assert creator_of(fields) == "kubectl-client-side-apply"
    assert creator_of(None) == "unknown"


def cond(type_: str, status: str, reason: str, time: str, generation: int = 1) -> Condition:
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=f"{type_} {reason}",
        last_transition_time=time,
        observed_generation=generation,
    )


RUNNING = replace(
    FACTS,
    conditions=[
        cond("QuotaAdmitted", "True", "Admitted", "2026-01-01T00:00:01Z"),
        cond("ProfileResolved", "True", "NoProfile", "2026-01-01T00:00:01Z"),
        cond("Running", "True", "AllPodsRunning", "2026-01-01T00:00:05Z"),
        cond("Suspended", "False", "NotSuspended", "2026-01-01T00:00:01Z"),
    ],
    checkpoint="llama-step-100",
    checkpoint_time="2026-01-01T00:10:00Z",
    restarts=2,
    last_failure="2026-01-01T00:08:00Z",
)


def test_operator_actions_are_recorded_with_the_acting_controllers_identity() -> None:
    d = decide(RUNNING, [])
    got = {(r["spec"]["action"], r["spec"]["actor"], r["spec"]["time"]) for r in d.create}
    sa = "system:serviceaccount:trainer-operator-system:trainer-operator-"
    assert got == {
        ("Created", "kubectl-client-side-apply", "2026-01-01T00:00:00Z"),
        ("Admitted", sa + "quota", "2026-01-01T00:00:01Z"),
        ("Started", sa + "trainer", "2026-01-01T00:00:05Z"),
        ("Restarted", sa + "trainer", "2026-01-01T00:08:00Z"),
        ("Checkpointed", sa + "checkpoint", "2026-01-01T00:10:00Z"),
    }
    assert decide(RUNNING, d.create).create == ()  # written once, however often the Trainer is seen


def test_each_restart_and_each_new_transition_is_a_record_of_its_own() -> None:
    first = decide(RUNNING, []).create
    later = replace(
        RUNNING,
        restarts=3,
        conditions=[*RUNNING.conditions[:3], cond("Suspended", "True", "SuspendedByUser", "2026-01-01T00:20:00Z")],
    )
    second = decide(later, first).create
    assert {r["spec"]["action"] for r in second} == {"Restarted", "Suspended"}
    resumed = replace(later, conditions=[cond("Suspended", "False", "Resumed", "2026-01-01T00:30:00Z")])
    assert {r["spec"]["action"] for r in decide(resumed, [*first, *second]).create} == {"Resumed"}
