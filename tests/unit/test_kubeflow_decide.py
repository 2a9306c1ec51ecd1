"""What the kubeflow controller does with one job (pure)."""

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainerop_kubeflow.convert import to_trainer
from trainerop_kubeflow.decide import APPLIED_ANNOTATION, OUR_MANAGER, Decision, Observed, decide, with_hash
from trainerop_kubeflow.kinds import JOB_KINDS

PYTORCH = JOB_KINDS["PyTorchJob"]
NOW = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)


def container() -> dict[str, Any]:
    return {"template": {"spec": {"containers": [{"name": "pytorch", "image": "mnist:1"}]}}}


def job(**run_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "team-a", "uid": "uid-9", "generation": 1},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": {"Master": container(), "Worker": container()}},
    }


def stored(trainer: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Trainer as the API server holds it: with defaults the job never set."""
    out = copy.deepcopy(trainer)
    out["metadata"]["uid"] = "trainer-uid"
    out["spec"]["topology"]["replicationFactor"] = 1
    out["spec"]["runPolicy"]["restartScope"] = "Pod"
    return {**out, "status": status or {}}


def observe(j: dict[str, Any], trainer: dict[str, Any] | None = None, upstream: bool = False) -> Decision:
    return decide(Observed(PYTORCH, j, trainer, upstream, NOW))


def test_a_new_job_gets_its_trainer_and_the_created_condition() -> None:
    d = observe(job())
    assert d.trainer == with_hash(to_trainer(PYTORCH, job()))
    assert d.status is not None
    assert [c["type"] for c in d.status["conditions"]] == ["Created"]


def test_a_trainer_that_holds_the_job_as_it_is_is_not_applied_again() -> None:
    trainer = stored(with_hash(to_trainer(PYTORCH, job())), {"phase": "Running"})
    d = observe(job(), trainer)
    assert d.trainer is None
    assert d.status is not None
    assert d.status["conditions"][-1]["type"] == "Running"
    again = observe({**job(), "status": d.status}, trainer)
    assert again == Decision()  # a resync of an unchanged job: nothing to do


def test_a_changed_job_applies_its_trainer_again() -> None:
    trainer = stored(with_hash(to_trainer(PYTORCH, job())))
    suspended = job(suspend=True)
    assert observe(suspended, trainer).trainer == with_hash(to_trainer(PYTORCH, suspended))


def test_a_field_the_job_no_longer_sets_is_applied_away() -> None:
    with_port = job()
    with_port["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "pytorchjob-port", "containerPort": 29400}
    ]
    trainer = stored(with_hash(to_trainer(PYTORCH, with_port)))
    applied = observe(job(), trainer).trainer
    assert applied is not None
    assert "port" not in applied["spec"]  # the apply leaves it out, and so takes it away


def test_an_update_its_trainer_cannot_carry_leaves_the_run_as_it_was_and_says_why() -> None:
    trainer = stored(with_hash(to_trainer(PYTORCH, job())), {"phase": "Running"})
    broken = job()
    broken["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    d = observe(broken, trainer)
    assert d.trainer is None
    assert [e[1] for e in d.events] == ["PyTorchJobUpdateRefused"]
    assert d.status is not None
    assert d.status["conditions"][-1]["type"] == "Running"  # not Failed: the run goes on


def test_a_job_another_operator_has_started_stays_its_own_and_ours_stays_ours() -> None:
    theirs = job()
    theirs["metadata"]["managedFields"] = [
        {"manager": "training-operator", "operation": "Update", "subresource": "status"}
    ]
    assert observe(theirs) == Decision()
    ours = stored(with_hash(to_trainer(PYTORCH, job())), {"phase": "Running"})
    assert observe(job(), ours, upstream=True).status is not None  # upstream installed later: the run stays ours


@pytest.mark.parametrize(
    ("managed_by", "upstream", "acts"),
    [
        (None, False, True),
        ("kubeflow.org/training-operator", False, True),
        (None, True, False),  # Kubeflow's own operator runs: it acts, never both
        (OUR_MANAGER, True, True),  # unless the job names this operator
        ("kueue.x-k8s.io/multikueue", False, False),  # another controller's
    ],
)
def test_who_acts_on_a_job(managed_by: str | None, upstream: bool, acts: bool) -> None:
    policy = {"managedBy": managed_by} if managed_by else {}
    d = observe(job(**policy), upstream=upstream)
    assert (d.trainer is not None) is acts
    assert (d.status is not None) is acts


def test_a_refused_job_fails_validation_once() -> None:
    bad = job()
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    d = observe(bad)
    assert d.trainer is None
    assert d.status is not None
    assert d.status["conditions"][-1]["reason"] == "PyTorchJobFailedValidation"
    assert [e[1] for e in d.events] == ["PyTorchJobFailedValidation"]
    assert observe({**bad, "status": d.status}) == Decision()  # said once


def test_a_trainer_of_the_jobs_name_that_is_not_its_own_is_left_alone_and_said() -> None:
    other = stored(with_hash(to_trainer(PYTORCH, job())))
    other["metadata"]["ownerReferences"] = [{"uid": "someone-else", "controller": True}]
    d = observe(job(), other)
    assert d.trainer is None
    assert [e[1] for e in d.events] == ["TrainerNameTaken"]
    assert d.requeue_after is not None


def test_a_finished_job_is_deleted_past_its_ttl_and_never_gets_a_trainer_again() -> None:
    done = {
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}],
        "completionTime": "2026-12-04T09:59:00Z",
    }
    waiting = observe({**job(ttlSecondsAfterFinished=120), "status": done})
    assert (waiting.trainer, waiting.delete, waiting.requeue_after) == (None, False, 60.0)
    assert observe({**job(ttlSecondsAfterFinished=30), "status": done}).delete
    assert observe({**job(), "status": done}) == Decision()  # no TTL: it stays, without a new Trainer


def test_a_job_being_deleted_gets_no_trainer_again_nor_a_status() -> None:
    going = job()
    going["metadata"]["deletionTimestamp"] = "2026-12-04T09:59:00Z"  # a foreground deletion waits
    assert observe(job()).trainer is not None
    assert observe(going) == Decision()  # its Trainer gone first: not made again


def test_the_ttl_is_counted_from_the_completion_the_trainer_reports() -> None:
    trainer = stored(
        with_hash(to_trainer(PYTORCH, job())),
        {"phase": "Succeeded", "progress": {"completionTime": "2026-12-04T09:59:30Z"}},
    )
    d = observe(job(ttlSecondsAfterFinished=60), trainer)
    assert d.status is not None
    assert d.status["completionTime"] == "2026-12-04T09:59:30Z"
    assert d.requeue_after == 30.0


def replicas(running: int, phase: str = "Pending") -> dict[str, Any]:
    roles = {"master": {"active": 1, "ready": 1}, "worker": {"active": 3, "ready": running}}
    return {"phase": phase, "topology": {"replicas": roles}}


@pytest.mark.parametrize(
    ("held_for", "now_says", "written", "requeue_after"),
    [
        (None, replicas(2), False, 5.0),  # counts alone: held, for a change of conditions to carry them
        (1, replicas(2), False, 4.0),  # held for a second already
        (5, replicas(2), True, None),  # held long enough: written
        (None, replicas(3, "Running"), True, None),  # a condition changes: at once, counts and all
        (None, replicas(1), False, None),  # nothing changed
        (None, replicas(1) | {"progress": {"startTime": "2026-12-04T09:59:59Z"}}, False, 5.0),  # started: waits too
    ],
)
def test_a_starting_jobs_counts_alone_wait_for_its_next_condition(
    held_for: int | None, now_says: dict[str, Any], written: bool, requeue_after: float | None
) -> None:
    """Each pod that starts moves the counts: written each time, a status write per pod."""
    trainer = stored(with_hash(to_trainer(PYTORCH, job())), replicas(1))
    before = observe(job(), trainer).status
    assert before is not None
    since = None if held_for is None else NOW - timedelta(seconds=held_for)
    d = decide(Observed(PYTORCH, {**job(), "status": before}, {**trainer, "status": now_says}, False, NOW, None, since))
    assert (d.status is not None, d.requeue_after, d.counts_held) == (written, requeue_after, requeue_after is not None)


def test_a_trainer_applied_but_not_yet_brought_by_its_watch_is_not_applied_again() -> None:
    """Under a ramp the Trainers' watch lags the applies: each reconcile meanwhile applied again."""
    wanted = with_hash(to_trainer(PYTORCH, job()))
    digest = wanted["metadata"]["annotations"][APPLIED_ANNOTATION]
    assert decide(Observed(PYTORCH, job(), None, False, NOW, applied=digest)).trainer is None
    assert decide(Observed(PYTORCH, job(), None, False, NOW, applied="an-older-one")).trainer == wanted
    changed = job(suspend=True)  # changed since: applied again, whatever the watch has brought
    again = decide(Observed(PYTORCH, changed, stored(wanted), False, NOW, applied=digest)).trainer
    assert again == with_hash(to_trainer(PYTORCH, changed))


def test_a_trainer_leads_back_to_the_job_that_controls_it() -> None:
    from trainerop_kubeflow.controller import owning_job, upstream_validator

    trainer = {
        "metadata": {
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "tf", "controller": True}]
        }
    }
    assert owning_job(trainer) == ("TFJob", "tf")
    assert (
        owning_job(
            {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": True}]}}
        )
        is None
    )
    assert owning_job({"metadata": {}}) is None
    # the name Kubeflow's own operator gives its webhook of a kind (its manifests' webhook names)
    assert upstream_validator(PYTORCH) == "validator.pytorchjob.training-operator.kubeflow.org"
