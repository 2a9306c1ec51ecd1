"""A Trainer the kubeflow controller makes for a Kubeflow job: its creation record names the user
recorded for the job's creation (trainerop_audit.decide), at once once that record exists; the
unknown-user fallback after the grace names the job (issue 51)."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainerop_audit.corroboration import CORROBORATED, identified
from trainerop_audit.decide import (
    UNOBSERVED_AFTER_SECONDS,
    Observed,
    Owner,
    decide,
    kubeflow_owner,
    read_uids,
)
from trainerop_audit.seal import forgettable, held
from trainerop_audit.user_actions import observe
from trainerop_common.api import AuditLog

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
ALICE = {"username": "alice@example.com", "uid": "u-1", "groups": ["team-a", "system:authenticated"]}
JOB = Owner("PyTorchJob", "mnist", "9876543210fedcba")
TRAINER = Observed(
    "team-a", "mnist", "0123456789abcdef", 1, "trainer-operator/kubeflow", "2026-01-01T00:00:00Z", owner=JOB
)


def job_created(uid: str = JOB.uid, operation: str = "CREATE") -> dict[str, Any]:
    """The webhook's record of alice's request on the PyTorchJob, corroborated."""
    meta = {"name": "mnist", "namespace": "team-a", "uid": uid, "generation": 1}
    request = {
        "uid": "7f0c1c5e-0000-4000-8000-000000000001",
        "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "namespace": "team-a",
        "name": "mnist",
        "operation": operation,
        "userInfo": ALICE,
        "object": {"metadata": meta, "spec": {}} if operation == "CREATE" else None,
        "oldObject": {"metadata": meta, "spec": {}} if operation == "DELETE" else None,
    }
    record = observe({"request": request}, "2025-12-31T23:59:59.000000Z", "trainer-operator-system", None)
    assert record is not None
    return identified(record, CORROBORATED) | {"metadata": record["metadata"] | {"uid": "r-1"}}


ON_BEHALF = ("alice@example.com", "CreatedOnBehalf", {"onBehalfOf": "PyTorchJob/mnist", "identity": "corroborated"})
NOT_A_JOBS = replace(TRAINER, owner=None)

# (the Trainer, the records there are besides its own, seconds since it was created, the webhook
# still writing a record of the Trainer's own creation) -> the creation record written (its user,
# reason, details; None: none yet) and when to look again
CASES = [
    # the job's creation on record: the Trainer's names its user at once; also as the controller
    # holds the job's record (seal.held)
    (TRAINER, [job_created()], 1, False, ON_BEHALF, None),
    (TRAINER, [held(job_created())], 1, False, ON_BEHALF, None),
    # a user's own request creating the Trainer is being recorded: that record comes first
    (TRAINER, [job_created()], 1, True, None, UNOBSERVED_AFTER_SECONDS - 1),
    # not (yet) on record: wait for it
    (TRAINER, [], 5, False, None, UNOBSERVED_AFTER_SECONDS - 5),
    # another job's creation, or this job's deletion, is not its creation
    (TRAINER, [job_created(uid="other")], 5, False, None, UNOBSERVED_AFTER_SECONDS - 5),
    (TRAINER, [job_created(operation="DELETE")], 5, False, None, UNOBSERVED_AFTER_SECONDS - 5),
    # never on record: an unknown user, the job named
    (TRAINER, [], 31, False, ("unknown", "RequestNotObserved", {"onBehalfOf": "PyTorchJob/mnist"}), None),
    # the job's record arriving late still names its user
    (TRAINER, [job_created()], 3600, False, ON_BEHALF, None),
    # a Trainer no Kubeflow job made: as before, whatever job records there are
    (NOT_A_JOBS, [job_created()], 5, False, None, UNOBSERVED_AFTER_SECONDS - 5),
    (NOT_A_JOBS, [job_created()], 31, False, ("unknown", "RequestNotObserved", None), None),
]


@pytest.mark.parametrize(("t", "others", "age", "pending", "written", "recheck"), CASES)
def test_a_trainer_made_for_a_kubeflow_job_is_recorded_as_created_for_the_jobs_creator(
    t: Observed,
    others: list[dict[str, Any]],
    age: float,
    pending: bool,
    written: tuple[str, str, dict[str, str] | None] | None,
    recheck: float | None,
) -> None:
    d = decide(t, others, CREATED + timedelta(seconds=age), creation_pending=pending)
    assert d.recheck_after == recheck
    if written is None:
        assert d.create == ()
        assert d.status["audit"]["recorded"]["created"] is False  # looked at again
        return
    (record,) = d.create
    AuditLog.model_validate(record)
    spec = record["spec"]
    username, reason, details = written
    assert (record["metadata"]["name"], spec["action"], spec["verb"]) == ("mnist-created-01234567", "Created", "create")
    assert (spec["user"]["username"], spec["reason"]) == (username, reason)
    assert spec["objectRef"]["resource"] == "trainers"
    assert spec["objectRef"]["uid"] == t.uid
    assert spec.get("details") == details
    assert d.status["audit"]["records"] == 1  # the job's record is not the Trainer's
    assert d.status["audit"]["recorded"]["created"] is True


def test_the_on_behalf_record_says_who_made_the_trainer_for_whom() -> None:
    (record,) = decide(TRAINER, [job_created()], CREATED).create
    spec = record["spec"]
    assert spec["user"] == ALICE
    assert (
        spec["message"] == "Trainer mnist created by the kubeflow controller for PyTorchJob mnist of alice@example.com"
    )
    assert (spec["stageTimestamp"], spec["stage"]) == ("2026-01-01T00:00:00Z", "ResponseComplete")
    (unknown,) = decide(TRAINER, [], CREATED + timedelta(minutes=1)).create
    assert unknown["spec"]["message"].startswith(
        "Trainer mnist created by the kubeflow controller for PyTorchJob mnist of an unknown user"
    )


@pytest.mark.parametrize(
    ("refs", "owner"),
    [
        ([{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "m", "uid": "u", "controller": True}], True),
        ([{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "m", "uid": "u"}], False),  # not its controller
        ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "m", "uid": "u", "controller": True}], False),
        ([{"apiVersion": "kubeflow.org.example/v1", "kind": "X", "name": "m", "uid": "u", "controller": True}], False),
        (None, False),
    ],
)
def test_the_kubeflow_owner_is_the_controlling_reference_of_group_kubeflow_org(
    refs: list[dict[str, Any]] | None, owner: bool
) -> None:
    assert (kubeflow_owner(refs) is not None) is owner


def test_a_jobs_creation_record_stays_held_while_a_trainer_made_for_it_lives() -> None:
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist", "uid": JOB.uid, "controller": True}
    trainer = {"metadata": {"uid": TRAINER.uid, "ownerReferences": [ref]}}
    assert read_uids([trainer]) == {TRAINER.uid, JOB.uid}
    record = held(job_created()) | {
        "metadata": {"namespace": "team-a", "name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"}
    }
    seal = {
        "metadata": {"namespace": "team-a", "name": "audit-seal-00000001"},
        "spec": {"action": "Sealed", "seal": {"sequence": 1, "records": ["r"]}},
    }
    later = CREATED + timedelta(hours=1)
    assert forgettable([record, seal], read_uids([trainer]), later) == []
    assert forgettable([record, seal], read_uids([]), later) == [record]
