"""Save before a disruption, the checkpoint controller's part (pure; docs/checkpoints.md).

A trigger — the quota controller waiting for a checkpoint under a run it must move
(status.quota.renegotiation), or a user's ``checkpoint-requested`` annotation — becomes one
:class:`SaveRequest` in status.checkpoint: every rank saves at the same step, so the shards form
one checkpoint that the quorum commits. The step is the furthest any rank's heartbeat reported plus
two heartbeats' worth of steps (a rank reads the request from its next heartbeat's response, and
must not be past the step by then). The request is Committed when a checkpoint at that step or
later commits, Missed when its deadline passes first (the run then moves from its previous
commit). A trigger answered once is not asked again: the request carries the trigger's id.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from trainerop_common.api.trainer import RenegotiationStatus, SaveRequest
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.contracts import (
    CHECKPOINT_REQUESTED_ANNOTATION,
    STEP_ANNOTATION,
    STEPS_PER_BEAT_ANNOTATION,
    USER_REQUEST,
    save_request_id,
)
from trainerop_common.outcome import Event

BEATS_AHEAD = 2  # heartbeats' worth of steps between the furthest rank and the step asked
ASK_AGAIN_SECONDS = 5.0  # while a request is open: Leases of new ranks asked, the deadline watched
REQUESTED = USER_REQUEST


@dataclass(frozen=True)
class Trigger:
    """Why a save is wanted now, and until when the run waits for it."""

    id: str
    reason: str
    message: str
    deadline: datetime


@dataclass(frozen=True)
class RankReport:
    """What one rank's Lease says: the step it reached, the steps between its last two beats."""

    step: int
    steps_per_beat: int | None = None


@dataclass(frozen=True)
class Latest:
    """The newest committed checkpoint."""

    name: str
    step: int


def whole(text: str | None) -> int | None:
    """A non-negative integer annotation, else None."""
    return int(text) if text is not None and text.isdigit() else None


def rank_report(annotations: Mapping[str, str]) -> RankReport | None:
    """A rank's report from its Lease's annotations (None: it has not reported a step)."""
    step = whole(annotations.get(STEP_ANNOTATION))
    return None if step is None else RankReport(step, whole(annotations.get(STEPS_PER_BEAT_ANNOTATION)))


def user_asked(
    annotations: Mapping[str, str], latest: SaveRequest | None, now: datetime, deadline_seconds: float
) -> datetime | None:
    """The time of a user's request not answered yet: the annotation's RFC 3339 time, when later
    than the latest request and not past its own deadline (an old annotation asks nothing again,
    even where the latest request is gone: storage that was not ready drops the section); a value
    that is not a time asks nothing."""
    value = annotations.get(CHECKPOINT_REQUESTED_ANNOTATION)
    try:
        asked = parse_time(value) if value else None
    except ValueError:
        return None
    if asked is None or asked.tzinfo is None or asked + timedelta(seconds=deadline_seconds) <= now:
        return None
    if latest is not None and asked <= parse_time(latest.requested_at):
        return None
    return asked


def trigger_of(
    annotations: Mapping[str, str],
    renegotiation: RenegotiationStatus | None,
    latest: SaveRequest | None,
    now: datetime,
    deadline_seconds: float,
) -> Trigger | None:
    """What asks for a save now: a move the quota controller holds for a checkpoint first, else a
    user's request; None: nothing (or only what the latest request already answers)."""
    if renegotiation is not None and renegotiation.waiting_for_checkpoint:
        since = parse_time(renegotiation.since)
        end = renegotiation.deadline
        deadline = parse_time(end) if end else since + timedelta(seconds=deadline_seconds)
        why = renegotiation.message or renegotiation.reason
        request_id = save_request_id(renegotiation.reason, renegotiation.since)
        return Trigger(request_id, renegotiation.reason, why, deadline)
    asked = user_asked(annotations, latest, now, deadline_seconds)
    if asked is None:
        return None
    what = f"asked at {rfc3339(asked)} ({CHECKPOINT_REQUESTED_ANNOTATION})"
    deadline = now + timedelta(seconds=deadline_seconds)
    return Trigger(save_request_id(REQUESTED, rfc3339(asked)), REQUESTED, what, deadline)


def is_new(trigger: Trigger | None, latest: SaveRequest | None) -> bool:
    """A trigger the latest request does not answer yet: the ranks' reports are read for it."""
    return trigger is not None and (latest is None or latest.id != trigger.id)


def target_step(reports: Sequence[RankReport], margin_steps: int) -> int | None:
    """The step every rank saves at: the furthest reported plus two heartbeats' worth of steps (at
    least ``margin_steps``, when no rank has measured its beat yet); None when no rank reports."""
    if not reports:
        return None
    beat = max((r.steps_per_beat or 0 for r in reports), default=0)
    return max(r.step for r in reports) + max(BEATS_AHEAD * beat, margin_steps)


def open_request(trigger: Trigger, reports: Sequence[RankReport], now: datetime, margin_steps: int) -> SaveRequest:
    """A new request for ``trigger``: Requested at the target step, or Missed at once when no rank
    reports its step (training code without heartbeats cannot be asked)."""
    step = target_step(reports, margin_steps)
    if step is None:
        message = f"{trigger.message}; no rank reports its step (no heartbeats): the run moves from its latest commit"
        phase = "Missed"
    else:
        furthest = max(r.step for r in reports)
        message = f"{trigger.message}; every rank saves at step {step} (the furthest reported is {furthest})"
        phase = "Requested"
    return SaveRequest(
        id=trigger.id,
        reason=trigger.reason,
        message=message[:1024],
        step=step,
        requested_at=rfc3339(now),
        deadline=rfc3339(trigger.deadline),
        phase=phase,
    )


def advance(request: SaveRequest, latest: Latest | None, now: datetime) -> SaveRequest:
    """An open request once a checkpoint at its step or later commits (Committed), or once its
    deadline passes first (Missed); an answered one as it is."""
    if request.phase != "Requested" or request.step is None:
        return request
    if latest is not None and latest.step >= request.step:
        return request.model_copy(update={"phase": "Committed", "checkpoint": latest.name})
    if now >= parse_time(request.deadline):
        return request.model_copy(update={"phase": "Missed"})
    return request


def announced(before: SaveRequest | None, after: SaveRequest, latest: Latest | None) -> tuple[Event, ...]:
    """The Event of a request opened, committed or missed now."""
    if before is not None and before.id == after.id and before.phase == after.phase:
        return ()
    if after.phase == "Committed":
        return (("Normal", "SaveCommitted", f"{after.checkpoint} (step {after.step}) committed for {after.reason}"),)
    if after.phase == "Missed":
        previous = f"{latest.name} (step {latest.step})" if latest else "the start (nothing committed yet)"
        asked = f"at step {after.step} " if after.step is not None else ""
        return (
            (
                "Warning",
                "SaveMissed",
                f"no checkpoint {asked}committed by {after.deadline} for {after.reason}: the run moves from {previous}",
            ),
        )
    return (("Normal", "SaveRequested", f"{after.message}, by {after.deadline}"),)


@dataclass(frozen=True)
class SavePlan:
    """Where the latest request stands now, its Event, the step the ranks' Leases must say (an
    open request's), whether the Leases' request goes (answered now) and when to look again."""

    request: SaveRequest | None
    events: tuple[Event, ...] = ()
    ask_step: int | None = None
    requeue_after: float | None = None
    answered: bool = False


def plan_save(
    trigger: Trigger | None,
    latest_request: SaveRequest | None,
    reports: Sequence[RankReport] | None,
    latest: Latest | None,
    now: datetime,
    margin_steps: int,
) -> SavePlan:
    """The save request after this look: a new one for a new trigger (``reports`` read for it),
    else the latest one advanced."""
    if trigger is not None and is_new(trigger, latest_request):
        request = advance(open_request(trigger, reports or (), now, margin_steps), latest, now)
    elif latest_request is not None:
        request = advance(latest_request, latest, now)
    else:
        return SavePlan(None)
    events = announced(latest_request, request, latest)
    if request.phase != "Requested":
        answered = latest_request is not None and latest_request.phase == "Requested" and request.step is not None
        return SavePlan(request, events, answered=answered)
    left = (parse_time(request.deadline) - now).total_seconds()
    return SavePlan(request, events, request.step, max(0.0, min(ASK_AGAIN_SECONDS, left)))
