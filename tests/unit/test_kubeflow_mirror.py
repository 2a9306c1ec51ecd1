"""A job's status in upstream's shape, from its Trainer's (pure)."""

from typing import Any

import pytest

from trainerop_kubeflow.kinds import JOB_KINDS
from trainerop_kubeflow.mirror import Job, job_status, refused_status, set_condition

JOB = Job(JOB_KINDS["PyTorchJob"], "team-a", "mnist", ("Master", "Worker"))
T0, T1, T2 = "2026-12-04T10:00:00Z", "2026-12-04T10:01:00Z", "2026-12-04T10:02:00Z"


def cond(type_: str, status: str = "True", reason: str = "", at: str = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "lastTransitionTime": at, "lastUpdateTime": at}


def kinds(conditions: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in conditions]


@pytest.mark.parametrize(
    ("before", "new", "after"),
    [
        ([], cond("Created"), [("Created", "True")]),
        # Running and Restarting exclude each other, the newer last.
        ([cond("Created"), cond("Running")], cond("Restarting"), [("Created", "True"), ("Restarting", "True")]),
        ([cond("Created"), cond("Restarting")], cond("Running"), [("Created", "True"), ("Running", "True")]),
        # Succeeded turns Running False.
        (
            [cond("Created"), cond("Running")],
            cond("Succeeded"),
            [("Created", "True"), ("Running", "False"), ("Succeeded", "True")],
        ),
        # Nothing after Failed.
        ([cond("Failed")], cond("Running"), [("Failed", "True")]),
        # The same status and reason: nothing new, the order kept.
        (
            [cond("Running", reason="R"), cond("Created")],
            cond("Running", reason="R", at=T1),
            [("Running", "True"), ("Created", "True")],
        ),
    ],
)
def test_upstreams_condition_rules(
    before: list[dict[str, Any]], new: dict[str, Any], after: list[tuple[str, str]]
) -> None:
    assert kinds(set_condition(before, new)) == after


def test_a_new_reason_with_the_same_status_keeps_the_transition_time() -> None:
    (kept,) = set_condition([cond("Running", reason="A", at=T0)], cond("Running", reason="B", at=T1))
    assert (kept["reason"], kept["lastTransitionTime"], kept["lastUpdateTime"]) == ("B", T0, T1)


RUNNING = {
    "phase": "Running",
    # a worker pending (active, not ready): upstream counts only running pods as active
    "topology": {"replicas": {"master": {"active": 1, "ready": 1}, "worker": {"active": 3, "ready": 2, "failed": 0}}},
    "progress": {"startTime": T0},
}


def test_a_running_trainer_makes_a_running_job_with_upstreams_reasons_and_counts() -> None:
    status = job_status(JOB, None, RUNNING, T1)
    assert kinds(status["conditions"]) == [("Created", "True"), ("Running", "True")]
    assert [c["reason"] for c in status["conditions"]] == ["PyTorchJobCreated", "PyTorchJobRunning"]
    assert status["conditions"][0]["message"] == "PyTorchJob mnist is created."
    assert status["conditions"][1]["message"] == "PyTorchJob team-a/mnist is running."
    assert status["replicaStatuses"] == {
        "Master": {
            "active": 1,
            "selector": "training.kubeflow.org/job-name=mnist,training.kubeflow.org/replica-type=master",
        },
        "Worker": {
            "active": 2,
            "selector": "training.kubeflow.org/job-name=mnist,training.kubeflow.org/replica-type=worker",
        },
    }
    assert (status["startTime"], status["lastReconcileTime"]) == (T0, T1)


def test_an_unchanged_trainer_changes_nothing_not_even_the_reconcile_time() -> None:
    first = job_status(JOB, None, RUNNING, T1)
    assert job_status(JOB, first, RUNNING, T2) == first


@pytest.mark.parametrize(
    ("phase", "last", "reason"),
    [
        ("Restarting", ("Restarting", "True"), "PyTorchJobRestarting"),
        ("Succeeded", ("Succeeded", "True"), "PyTorchJobSucceeded"),
        ("Failed", ("Failed", "True"), "PyTorchJobFailed"),
        ("Suspended", ("Suspended", "True"), "PyTorchJobSuspended"),
    ],
)
def test_each_phase_is_the_last_condition_as_the_state_column_shows(
    phase: str, last: tuple[str, str], reason: str
) -> None:
    running = job_status(JOB, None, RUNNING, T1)
    status = job_status(JOB, running, {**RUNNING, "phase": phase, "message": "pod mnist-worker-1 failed"}, T2)
    assert (status["conditions"][-1]["type"], status["conditions"][-1]["status"]) == last
    assert status["conditions"][-1]["reason"] == reason
    assert status["lastReconcileTime"] == T2


def test_the_restart_message_names_the_failed_replica_type() -> None:
    restarting = {"phase": "Restarting", "topology": {"replicas": {"worker": {"failed": 2}, "master": {}}}}
    said = job_status(JOB, None, restarting, T1)["conditions"][-1]["message"]
    assert said == "PyTorchJob mnist is restarting because 2 Worker replica(s) failed."


def test_a_failure_says_why_and_success_turns_running_false() -> None:
    failed = job_status(JOB, None, {"phase": "Failed", "message": "pod mnist-worker-0 failed with exit code 1"}, T1)
    assert (
        failed["conditions"][-1]["message"]
        == "PyTorchJob team-a/mnist is failed: pod mnist-worker-0 failed with exit code 1"
    )
    done = job_status(
        JOB, job_status(JOB, None, RUNNING, T1), {"phase": "Succeeded", "progress": {"completionTime": T2}}, T2
    )
    assert kinds(done["conditions"]) == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    assert done["completionTime"] == T2


def test_a_resumed_job_says_so() -> None:
    suspended = job_status(JOB, None, {"phase": "Suspended"}, T1)
    resumed = job_status(JOB, suspended, RUNNING, T2)
    suspended_condition = next(c for c in resumed["conditions"] if c["type"] == "Suspended")
    assert (suspended_condition["status"], suspended_condition["reason"]) == ("False", "PyTorchJobResumed")
    assert resumed["conditions"][-1]["type"] == "Running"


def test_a_job_no_trainer_can_carry_fails_validation_naming_the_problems() -> None:
    status = refused_status(JOB, None, ["spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"], T1)
    (failed,) = status["conditions"]
    assert (failed["type"], failed["reason"]) == ("Failed", "PyTorchJobFailedValidation")
    assert "must be 1" in failed["message"]
    assert status["completionTime"] == T1  # finished: its ttlSecondsAfterFinished counts from then
