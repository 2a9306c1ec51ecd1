"""A committed checkpoint the resuming pods cannot load, and data a live pod resumes from: the run
falls back to the previous committed checkpoint (or waits when none is left), and retention never
deletes what a live pod's RESUME_FROM names (issue 51)."""

from typing import Any

import pytest

from tests.unit.test_decide_checkpoint import DIR, observe, spec, view
from trainerop_checkpoint.decide import UNREADABLE, CheckpointView, resume_points
from trainerop_common.api import Checkpoint
from trainerop_sdk.layout import checkpoint_path


def reported_unreadable(v: CheckpointView, *shards: int, **status: Any) -> CheckpointView:
    """``v`` with ``shards`` reported unreadable by their pods (and ``status`` over its own)."""
    body = v.checkpoint.model_dump(by_alias=True, exclude_none=True)
    body["spec"]["unreadable"] = [
        {"index": i, "pod": f"t-worker-{i}", "problem": "copy-0: missing, copy-1: sha256 mismatch"} for i in shards
    ]
    body["status"] = {**body.get("status", {}), **status}
    return CheckpointView(v.name, v.uid, v.created, Checkpoint.model_validate(body))


def marked(step: int) -> CheckpointView:
    """A checkpoint already marked unreadable by the controller."""
    return reported_unreadable(view(step, phase="Committed"), 1, phase="Failed", reason=UNREADABLE, message="m")


def test_a_latest_reported_unreadable_is_marked_and_the_run_resumes_from_the_previous() -> None:
    previous, latest = view(10, phase="Committed"), reported_unreadable(view(20, phase="Committed"), 1)
    d = observe([previous, latest])
    section = d.status["checkpoint"]
    assert (section["latest"], section["resumeFrom"]) == (previous.name, checkpoint_path(DIR, 10))
    env = {e["name"]: e.get("value") for e in section["contribution"]["pod"]["env"]}
    assert env["RESUME_FROM"] == checkpoint_path(DIR, 10)
    ready = d.conditions[0]
    assert (ready.status, ready.reason) == ("True", "ResumedFromPrevious")
    assert ready.message.startswith("resumes from t-step-10 (epoch 1, step 10): t-step-20 (step 20) could not be")
    # The mark is written after the Trainer's new resume point, never before it.
    assert latest.name not in d.checkpoints
    mark = d.marks[latest.name]
    assert (mark["phase"], mark["reason"]) == ("Failed", UNREADABLE)
    assert "shard 1 (pod t-worker-1): copy-0: missing" in mark["message"]
    assert mark["commitTime"]  # the record of when it committed stays
    [event] = d.events
    assert event[:2] == ("Warning", "CheckpointUnreadable")
    assert event[2].startswith("t-step-20 (step 20): no copy of a shard could be loaded: shard 1")
    assert event[2].endswith("the run resumes from t-step-10 (step 10)")
    assert not d.collect  # its data stays until a newer checkpoint commits
    assert d.problem is None


def test_once_marked_nothing_more_is_written_or_said() -> None:
    d = observe([view(10, phase="Committed"), marked(20)])
    assert (d.checkpoints, d.marks, d.events, d.collect) == ({}, {}, (), ())
    assert d.conditions[0].reason == "ResumedFromPrevious"
    assert d.status["checkpoint"]["latest"] == "t-step-10"


def test_a_newer_commit_resumes_as_usual_and_the_unreadable_data_goes() -> None:
    d = observe([view(10, phase="Committed"), marked(20), view(30, phase="Committed")])
    assert d.conditions[0].reason == "Resumable"
    assert d.status["checkpoint"]["latest"] == "t-step-30"
    collected = {c.checkpoint: c.status for c in d.collect}
    assert set(collected) == {"t-step-20"}
    assert (collected["t-step-20"]["phase"], collected["t-step-20"]["reason"]) == ("Failed", UNREADABLE)


@pytest.mark.parametrize(
    "earlier",
    [
        pytest.param([view(10, phase="GarbageCollected")], id="maxRetention 1: the previous one is collected"),
        pytest.param([], id="the first checkpoint"),
    ],
)
def test_without_an_earlier_committed_checkpoint_the_run_waits_and_says_how_to_start_over(
    earlier: list[CheckpointView],
) -> None:
    latest = reported_unreadable(view(20, phase="Committed"), 0, 1)
    d = observe([*earlier, latest], trainer_spec=spec(maxRetention=1))
    ready = d.conditions[0]
    assert (ready.status, ready.reason) == ("False", "NoReadableCheckpoint")
    assert "kubectl delete checkpoint t-step-20 -n ns" in ready.message
    assert d.problem == ready  # a Warning Event once
    assert "latest" not in d.status["checkpoint"]
    assert "no earlier committed checkpoint remains" in d.events[0][2]
    assert "shard 0 (pod t-worker-0)" in d.marks[latest.name]["message"]
    assert "shard 1 (pod t-worker-1)" in d.marks[latest.name]["message"]


@pytest.mark.parametrize("phase", ["GarbageCollected", "Failed"])
def test_a_report_on_a_checkpoint_that_is_not_committed_changes_nothing(phase: str) -> None:
    other = reported_unreadable(view(20, phase=phase), 1)
    d = observe([view(10, phase="Committed"), other])
    assert (d.checkpoints, d.marks) == ({}, {})
    assert d.conditions[0].reason == "Resumable"


def test_an_older_checkpoint_reported_unreadable_leaves_the_resume_point_alone() -> None:
    d = observe([reported_unreadable(view(10, phase="Committed"), 0), view(20, phase="Committed")])
    assert d.marks["t-step-10"]["reason"] == UNREADABLE
    assert d.conditions[0].reason == "Resumable"
    assert d.status["checkpoint"]["latest"] == "t-step-20"


@pytest.mark.parametrize(
    ("pinned", "collected"),
    [
        pytest.param(frozenset(), {"t-step-10", "t-step-15", "t-step-20"}, id="no live pod"),
        pytest.param(frozenset({checkpoint_path(DIR, 10)}), {"t-step-15", "t-step-20"}, id="a live pod's"),
        pytest.param(frozenset({checkpoint_path(DIR, 15) + "/"}), {"t-step-10", "t-step-20"}, id="a failed one"),
    ],
)
def test_retention_never_collects_what_a_live_pod_resumes_from(pinned: frozenset[str], collected: set[str]) -> None:
    views = [
        view(10, phase="Committed"),
        view(15, phase="Failed"),
        view(20, phase="Committed"),
        view(30, phase="Committed"),
    ]
    d = observe(views, trainer_spec=spec(maxRetention=1), pinned=pinned)
    assert {c.checkpoint for c in d.collect} == collected
    assert d.status["checkpoint"]["latest"] == "t-step-30"


def pod(resume_from: str, phase: str = "Running", uid: str = "uid-t", init: bool = False) -> dict[str, Any]:
    container = {"name": "c", "env": [{"name": "A", "value": "x"}, {"name": "RESUME_FROM", "value": resume_from}]}
    key = "initContainers" if init else "containers"
    labels = {"trainer.operator.kubeflow.org/trainer-uid": uid}
    return {"metadata": {"labels": labels}, "spec": {key: [container]}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "points"),
    [
        pytest.param([pod("a"), pod("b", "Pending")], {"a", "b"}, id="running and pending"),
        pytest.param([pod("a", "Succeeded"), pod("b", "Failed")], set(), id="ended pods resume nothing"),
        pytest.param([pod("a", uid="uid-earlier")], set(), id="an earlier Trainer's pod"),
        pytest.param([pod("")], set(), id="a first start"),
        pytest.param([pod("a", init=True)], {"a"}, id="an init container's"),
    ],
)
def test_the_resume_points_of_live_pods(pods: list[dict[str, Any]], points: set[str]) -> None:
    assert resume_points(pods, "uid-t") == points
