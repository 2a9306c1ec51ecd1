"""The checkpoint controller's save before a disruption (save_request.py): which trigger asks, the
one step every rank saves at, and where a request goes."""

from datetime import UTC, datetime, timedelta

import pytest

from trainerop_checkpoint.save_request import (
    Latest,
    RankReport,
    Trigger,
    open_request,
    plan_save,
    rank_report,
    target_step,
    trigger_of,
)
from trainerop_common.api.trainer import RenegotiationStatus, SaveRequest
from trainerop_common.clock import rfc3339

G = "trainer.operator.kubeflow.org"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
RECLAIM = RenegotiationStatus(
    reason="SpotReclaimed",
    message="node n1 is being reclaimed",
    since="2026-12-05T11:59:50Z",
    waiting_for_checkpoint=True,
    deadline="2026-12-05T12:04:50Z",
)
ASKED = {f"{G}/checkpoint-requested": "2026-12-05T11:59:00Z"}


def request(**fields: object) -> SaveRequest:
    base: dict[str, object] = {
        "id": "SpotReclaimed@2026-12-05T11:59:50Z",
        "reason": "SpotReclaimed",
        "step": 200,
        "requested_at": "2026-12-05T11:59:55Z",
        "deadline": "2026-12-05T12:04:50Z",
    }
    return SaveRequest.model_validate(base | fields)


@pytest.mark.parametrize(
    ("annotations", "renegotiation", "latest", "want"),
    [
        ({}, None, None, None),  # nothing asks
        ({}, RECLAIM, None, ("SpotReclaimed@2026-12-05T11:59:50Z", "2026-12-05T12:04:50Z")),
        # the move first: the user's request is answered by the same save
        (ASKED, RECLAIM, None, ("SpotReclaimed@2026-12-05T11:59:50Z", "2026-12-05T12:04:50Z")),
        # a reclaim no longer waiting (it moved) asks nothing
        ({}, RECLAIM.model_copy(update={"waiting_for_checkpoint": False}), None, None),
        # no deadline from the quota: since + --save-deadline-seconds
        (
            {},
            RECLAIM.model_copy(update={"deadline": None}),
            None,
            ("SpotReclaimed@2026-12-05T11:59:50Z", "2026-12-05T12:04:50Z"),
        ),
        # a user's request: deadline from now
        (ASKED, None, None, ("Requested@2026-12-05T11:59:00Z", "2026-12-05T12:05:00Z")),
        # ... not once a later request answered it
        (ASKED, None, request(requested_at="2026-12-05T11:59:30Z"), None),
        # ... but a newer one asks again
        (
            ASKED,
            None,
            request(requested_at="2026-12-05T11:58:30Z"),
            ("Requested@2026-12-05T11:59:00Z", "2026-12-05T12:05:00Z"),
        ),
        # one older than its own deadline asks nothing (the latest request may be gone: storage
        # that was not ready drops the section)
        ({f"{G}/checkpoint-requested": "2026-12-05T11:54:59Z"}, None, None, None),
        # a value that is not a time (or has no zone) asks nothing
        ({f"{G}/checkpoint-requested": "now"}, None, None, None),
        ({f"{G}/checkpoint-requested": "2026-12-05T11:59:00"}, None, None, None),
    ],
)
def test_what_asks_for_a_save(
    annotations: dict[str, str],
    renegotiation: RenegotiationStatus | None,
    latest: SaveRequest | None,
    want: tuple[str, str] | None,
) -> None:
    got = trigger_of(annotations, renegotiation, latest, NOW, 300)
    assert (None if got is None else (got.id, rfc3339(got.deadline))) == want


@pytest.mark.parametrize(
    ("reports", "margin", "want"),
    [
        ([], 10, None),  # no rank reports a step: nothing can be asked
        ([RankReport(100)], 10, 110),  # no beat measured yet: the margin
        ([RankReport(100, 32), RankReport(96, 32)], 10, 164),  # two beats past the furthest
        ([RankReport(100, 2), RankReport(99, 3)], 10, 110),  # the margin when beats are short
        ([RankReport(100, 8), RankReport(60, 40)], 10, 180),  # the longest beat of any rank
    ],
)
def test_the_step_every_rank_saves_at(reports: list[RankReport], margin: int, want: int | None) -> None:
    assert target_step(reports, margin) == want


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({}, None),
        ({f"{G}/step": "64"}, RankReport(64)),
        ({f"{G}/step": "64", f"{G}/steps-per-beat": "32"}, RankReport(64, 32)),
        ({f"{G}/step": "-1"}, None),
        ({f"{G}/step": "64", f"{G}/steps-per-beat": "x"}, RankReport(64)),
    ],
)
def test_a_ranks_report_from_its_lease(annotations: dict[str, str], want: RankReport | None) -> None:
    assert rank_report(annotations) == want


TRIGGER = Trigger(
    "SpotReclaimed@2026-12-05T11:59:50Z", "SpotReclaimed", "node n1 is being reclaimed", NOW + timedelta(minutes=5)
)


def test_a_request_goes_from_requested_to_committed_with_one_event_each() -> None:
    opened = plan_save(TRIGGER, None, [RankReport(100, 32)], Latest("t-step-96", 96), NOW, 10)
    assert opened.request is not None
    assert (opened.request.phase, opened.request.step, opened.ask_step) == ("Requested", 164, 164)
    assert opened.events == (
        (
            "Normal",
            "SaveRequested",
            "node n1 is being reclaimed; every rank saves at step 164 (the furthest reported is 100), "
            "by 2026-12-05T12:05:00Z",
        ),
    )
    assert opened.requeue_after == 5.0  # new ranks' Leases asked, the deadline watched
    later = NOW + timedelta(seconds=10)
    # the same trigger again: no new request, the ranks not read again
    waiting = plan_save(TRIGGER, opened.request, None, Latest("t-step-128", 128), later, 10)
    assert (waiting.request, waiting.events, waiting.ask_step) == (opened.request, (), 164)
    done = plan_save(TRIGGER, opened.request, None, Latest("t-step-164", 164), later, 10)
    assert done.request is not None
    assert (done.request.phase, done.request.checkpoint, done.ask_step, done.requeue_after) == (
        "Committed",
        "t-step-164",
        None,
        None,
    )
    assert done.events == (("Normal", "SaveCommitted", "t-step-164 (step 164) committed for SpotReclaimed"),)
    assert done.answered  # the request is taken off the ranks' Leases
    # answered: it stays as it is, and says nothing more
    again = plan_save(TRIGGER, done.request, None, Latest("t-step-192", 192), later, 10)
    assert (again.request, again.events) == (done.request, ())


def test_a_request_past_its_deadline_is_missed_and_says_where_the_run_moves_from() -> None:
    opened = plan_save(TRIGGER, None, [RankReport(100, 32)], None, NOW, 10).request
    assert opened is not None
    late = plan_save(TRIGGER, opened, None, Latest("t-step-128", 128), NOW + timedelta(minutes=5), 10)
    assert late.request is not None
    assert late.request.phase == "Missed"
    assert late.events == (
        (
            "Warning",
            "SaveMissed",
            "no checkpoint at step 164 committed by 2026-12-05T12:05:00Z for SpotReclaimed: "
            "the run moves from t-step-128 (step 128)",
        ),
    )


def test_a_run_without_heartbeats_cannot_be_asked_and_its_request_is_missed_at_once() -> None:
    plan = plan_save(TRIGGER, None, [], None, NOW, 10)
    assert plan.request is not None
    assert (plan.request.phase, plan.request.step, plan.ask_step) == ("Missed", None, None)
    assert plan.events[0][:2] == ("Warning", "SaveMissed")
    assert "the run moves from the start (nothing committed yet)" in plan.events[0][2]


def test_a_new_trigger_replaces_an_answered_request() -> None:
    answered = request(phase="Committed", checkpoint="t-step-200")
    user = Trigger("Requested@2026-12-05T12:00:00Z", "Requested", "asked", NOW + timedelta(minutes=5))
    plan = plan_save(user, answered, [RankReport(300, 10)], Latest("t-step-200", 200), NOW, 10)
    assert plan.request is not None
    assert (plan.request.id, plan.request.phase, plan.request.step) == (user.id, "Requested", 320)


def test_nothing_asked_and_nothing_asked_before_is_no_request() -> None:
    assert plan_save(None, None, None, None, NOW, 10).request is None


def test_an_open_request_message_fits_the_status_field() -> None:
    long = Trigger("x@t", "SpotReclaimed", "n" * 2000, NOW + timedelta(minutes=1))
    assert len(open_request(long, [RankReport(1)], NOW, 10).message) == 1024


def test_a_trigger_whose_deadline_has_passed_already_is_missed_at_once() -> None:
    late = Trigger("SpotReclaimed@t", "SpotReclaimed", "notice", NOW - timedelta(seconds=1))
    plan = plan_save(late, None, [RankReport(100, 10)], None, NOW, 10)
    assert plan.request is not None
    assert (plan.request.phase, plan.ask_step, plan.requeue_after) == ("Missed", None, None)
    assert not plan.answered  # nothing was written on the Leases
