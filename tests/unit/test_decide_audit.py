"""The audit controller's pure decisions: operator actions from status, the watermark that keeps
retention from being undone, the record of a creation the webhook did not observe."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from trainerop_audit.decide import UNOBSERVED_AFTER_SECONDS, Observed, Recorded, decide, manager_of, summary_hold
from trainerop_common.api import AuditLog
from trainerop_common.api.base import Condition

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
LATER = CREATED + timedelta(hours=1)
FACTS = Observed("ns", "llama", "0123456789abcdef", 1, "kubectl-client-side-apply", "2026-01-01T00:00:00Z")
SA = "system:serviceaccount:trainer-operator-system:trainer-operator-"


def recorded_after(d_status: dict[str, object]) -> Recorded:
    audit = d_status["audit"]
    assert isinstance(audit, dict)
    return Recorded.parse(audit["recorded"])


def test_a_creation_the_webhook_did_not_observe_is_recorded_with_an_unknown_user_after_a_grace() -> None:
    early = decide(FACTS, [], CREATED + timedelta(seconds=5))
    assert early.create == ()
    assert early.recheck_after == UNOBSERVED_AFTER_SECONDS - 5
    assert recorded_after(early.status).created is False  # asked again, not forgotten
    d = decide(FACTS, [], LATER)
    (record,) = d.create
    assert record["metadata"]["name"] == "llama-created-01234567"
    spec = record["spec"]
    assert (spec["action"], spec["verb"], spec["stage"], spec["user"]) == (
        "Created",
        "create",
        "ResponseComplete",
        {"username": "unknown"},
    )
    assert "kubectl-client-side-apply" in spec["message"]
    assert spec["objectRef"] == {
        "resource": "trainers",
        "namespace": "ns",
        "name": "llama",
        "uid": "0123456789abcdef",
        "apiGroup": "trainer.operator.kubeflow.org",
        "apiVersion": "v1alpha1",
    }
    assert "ownerReferences" not in record["metadata"], "the trail must outlive the Trainer"
    AuditLog.model_validate(record)  # the CRD's own model accepts it
    assert d.status["audit"]["records"] == 1
    assert recorded_after(d.status).created is True


def test_the_webhooks_creation_record_is_not_duplicated() -> None:
    webhook_record = decide(FACTS, [], LATER).create[0]  # same name as the webhook's record
    d = decide(FACTS, [webhook_record], CREATED)
    assert d.create == ()
    assert d.recheck_after is None
    assert recorded_after(d.status).created is True


def test_records_of_an_earlier_trainer_with_the_same_name_do_not_count() -> None:
    earlier = decide(Observed("ns", "llama", "ffff", 1, "x", "2025-01-01T00:00:00Z"), [], LATER).create[0]
    d = decide(FACTS, [earlier], LATER)
    assert len(d.create) == 1
    assert d.status["audit"]["records"] == 1


def test_manager_is_the_first_spec_manager() -> None:
    fields = [
        {"manager": "kubectl-client-side-apply", "operation": "Update"},
        {"manager": "trainer-operator/trainer", "operation": "Apply", "subresource": "status"},
    ]
    assert manager_of(fields) == "kubectl-client-side-apply"
    assert manager_of(None) == "unknown"


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
    recorded=Recorded(created=True),
)


def test_operator_actions_are_recorded_with_the_acting_controllers_identity() -> None:
    d = decide(RUNNING, [], LATER)
    got = {
        (r["spec"]["action"], r["spec"]["user"]["username"], r["spec"]["stageTimestamp"], r["spec"]["verb"])
        for r in d.create
    }
    assert got == {
        ("Admitted", SA + "quota", "2026-01-01T00:00:01Z", "patch"),
        ("Started", SA + "trainer", "2026-01-01T00:00:05Z", "patch"),
        ("Restarted", SA + "trainer", "2026-01-01T00:08:00Z", "patch"),
        ("Checkpointed", SA + "checkpoint", "2026-01-01T00:10:00Z", "patch"),
    }
    for r in d.create:
        assert r["spec"]["objectRef"]["subresource"] == "status"
        assert r["spec"]["stage"] == "ResponseComplete"
        assert "system:serviceaccounts" in r["spec"]["user"]["groups"]
        AuditLog.model_validate(r)
    ids = {r["spec"]["auditID"] for r in d.create}
    assert len(ids) == 4
    assert ids == {r["spec"]["auditID"] for r in decide(RUNNING, [], LATER).create}  # stable
    # Seen again with its watermark, nothing is written again.
    again = replace(RUNNING, recorded=recorded_after(d.status))
    assert decide(again, d.create, LATER).create == ()


def test_records_removed_by_retention_are_not_written_again() -> None:
    d = decide(RUNNING, [], LATER)
    after_retention = replace(RUNNING, recorded=recorded_after(d.status))
    assert decide(after_retention, [], LATER + timedelta(days=400)).create == ()


def test_without_a_watermark_existing_records_are_not_written_twice() -> None:
    d = decide(RUNNING, [], LATER)
    assert decide(RUNNING, d.create, LATER).create == ()


def test_each_restart_and_each_new_transition_is_a_record_of_its_own() -> None:
    first = decide(RUNNING, [], LATER)
    later = replace(
        RUNNING,
        restarts=3,
        conditions=[*RUNNING.conditions[:3], cond("Suspended", "True", "SuspendedByUser", "2026-01-01T00:20:00Z")],
        recorded=recorded_after(first.status),
    )
    second = decide(later, first.create, LATER)
    assert {r["spec"]["action"] for r in second.create} == {"Restarted", "Suspended"}
    resumed = replace(
        later,
        conditions=[cond("Suspended", "False", "Resumed", "2026-01-01T00:30:00Z")],
        recorded=recorded_after(second.status),
    )
    assert {r["spec"]["action"] for r in decide(resumed, [], LATER).create} == {"Resumed"}
    # Running again after a stop is a new transition, so a new record.
    restarted = replace(resumed, conditions=[cond("Running", "True", "AllPodsRunning", "2026-01-01T00:40:00Z")])
    assert [r["spec"]["action"] for r in decide(restarted, [], LATER).create] == ["Started"]


def test_a_new_checkpoint_is_recorded_once() -> None:
    first = decide(RUNNING, [], LATER)
    newer = replace(
        RUNNING,
        checkpoint="llama-step-200",
        checkpoint_time="2026-01-01T00:20:00Z",
        recorded=recorded_after(first.status),
    )
    (record,) = decide(newer, [], LATER).create
    assert record["spec"]["action"] == "Checkpointed"
    assert "llama-step-200" in record["spec"]["message"]


def test_summary_counts_the_trainers_records_and_names_the_latest() -> None:
    d = decide(RUNNING, [], LATER)
    audit = d.status["audit"]
    assert isinstance(audit, dict)
    assert audit["records"] == 4
    latest = max(d.create, key=lambda r: r["spec"]["stageTimestamp"])
    assert audit["lastRecord"] == latest["metadata"]["name"]
    assert latest["spec"]["action"] == "Checkpointed"


def test_each_renegotiation_is_recorded_though_the_admission_stays_true() -> None:
    first = decide(RUNNING, [], LATER)
    moved = replace(
        RUNNING,
        conditions=[cond("QuotaAdmitted", "True", "Renegotiated", "2026-01-01T00:00:01Z"), *RUNNING.conditions[1:]],
        renegotiations=1,
        recorded=recorded_after(first.status),
    )
    d = decide(moved, [], LATER)
    (record,) = d.create
    assert (record["spec"]["action"], record["spec"]["reason"]) == ("Admitted", "Renegotiated")
    assert record["spec"]["user"]["username"] == SA + "quota"
    again = replace(moved, renegotiations=2, recorded=recorded_after(d.status))
    (second,) = decide(again, [], LATER).create
    assert second["metadata"]["name"] != record["metadata"]["name"]
    assert decide(replace(again, recorded=recorded_after(decide(again, [], LATER).status)), [], LATER).create == ()


def condition(type_: str, status: str, reason: str) -> Condition:
    return Condition(
        type=type_, status=status, reason=reason, last_transition_time="2026-01-01T00:00:05Z", observed_generation=1
    )


# Which condition of the shared status is an operator action, and whose (one row per condition).
ACTION_TABLE = [
    # condition (type, status, reason) -> action recorded, the controller that acted (None: no record)
    (("QuotaAdmitted", "True", "Admitted"), ("Admitted", "quota")),
    (("QuotaAdmitted", "True", "NoQuotaPolicy"), None),  # nothing was admitted
    (("QuotaAdmitted", "False", "WaitingForCapacity"), None),
    (("Running", "True", "AllPodsRunning"), ("Started", "trainer")),
    (("Running", "False", "PodsNotRunning"), None),
    (("Suspended", "True", "SuspendedByUser"), ("Suspended", "trainer")),
    (("Suspended", "False", "Resumed"), ("Resumed", "trainer")),
    (("Suspended", "False", "NotSuspended"), None),
    (("Succeeded", "True", "Succeeded"), ("Succeeded", "trainer")),
    (("Failed", "True", "BackoffLimitExceeded"), ("Failed", "trainer")),
    (("ProfileResolved", "True", "Resolved"), None),  # resolving a profile is no action on the run
]


@pytest.mark.parametrize(("cond", "recorded"), ACTION_TABLE, ids=["/".join(c) for c, _ in ACTION_TABLE])
def test_which_condition_is_an_operator_action(cond: tuple[str, str, str], recorded: tuple[str, str] | None) -> None:
    facts = replace(FACTS, conditions=[condition(*cond)], recorded=Recorded(created=True))
    got = [
        (r["spec"]["action"], r["spec"]["user"]["username"].removeprefix(SA)) for r in decide(facts, [], LATER).create
    ]
    assert got == ([recorded] if recorded else [])


ONE = {"records": 1, "recorded": {"created": True, "restarts": 0}, "lastRecord": "t-created-1"}
TWO = {"records": 2, "recorded": {"created": True, "restarts": 0}, "lastRecord": "t-started-1"}
NOTIFIED = {**TWO, "notified": {"conditions": {"Failed": "2026-01-01T00:00:00Z"}}}


# status.audit (the records' bookkeeping) may lag the records by the delay (10 s here); what the
# notifier marked is written at once.
@pytest.mark.parametrize(
    ("current", "wanted", "held_for", "wait"),
    [
        (ONE, ONE, None, 0.0),  # says it already: nothing to write
        ({}, ONE, None, 10.0),  # the first record: held for the delay
        (ONE, TWO, 4.0, 6.0),  # held 4 s: 6 to go
        (ONE, TWO, 12.0, 0.0),  # held long enough: written now
        (TWO, NOTIFIED, None, 0.0),  # a notification marked: at once
        ({**ONE, "notified": NOTIFIED["notified"]}, NOTIFIED, None, 10.0),  # the marks unchanged: may wait
        ({}, {**ONE, "notified": {}}, None, 10.0),  # nothing marked yet either way
    ],
)
def test_the_summary_waits_for_the_delay_unless_a_notification_was_marked(
    current: dict[str, object], wanted: dict[str, object], held_for: float | None, wait: float
) -> None:
    assert summary_hold(current, wanted, held_for, 10.0) == wait
    assert summary_hold(current, wanted, held_for, 0.0) == 0.0  # --summary-delay-seconds 0: never held
