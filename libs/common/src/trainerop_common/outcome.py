"""What one reconcile of a Trainer concludes (pure): the controller returns an :class:`Outcome`
and the shared runtime applies it the same way for every controller — the controller's own status
sections and conditions written by server-side apply (no request when they already hold), Events
posted, the Trainer looked at again when something falls due (docs/design/work-queue.md)."""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .conditions import Desired


@dataclass(frozen=True)
class StatusSection:
    """The part of an object's status one controller owns (docs/design/status-protocol.md): its
    top-level fields and its condition types."""

    fields: tuple[str, ...]
    conditions: tuple[str, ...] = ()


# A Kubernetes Event to post about the Trainer: (type, reason, message); type Normal or Warning.
Event = tuple[str, str, str]


def soonest(*delays: float | None) -> float | None:
    """The soonest of these requeue delays (one already due: now), None when there is none."""
    due = [max(d, 0.0) for d in delays if d is not None]
    return min(due) if due else None


@dataclass(frozen=True)
class Outcome:
    # The controller's own status fields (field name -> value; a field left out is removed) and
    # conditions; None: write nothing (the controller has no say on this Trainer now).
    status: Mapping[str, Any] | None = None
    conditions: tuple[Desired, ...] = ()
    events: tuple[Event, ...] = ()  # posted before the write, whatever it does
    on_change: tuple[Event, ...] = ()  # posted only when the write changed the status: once per change
    requeue_after: float | None = None  # seconds until something falls due (a backoff, a deadline)
    retry: bool = False  # part of the work was refused (the Events say why): tried again with backoff
    # Work to do once the status is written (deleting data the new status no longer points at);
    # returns when to look again.
    after: Callable[[], Awaitable[float | None]] | None = None
    # The write and the work after it go ahead of other requests waiting for the client's rate
    # limit (a started run recovering from a failure: kube.urgent_requests).
    urgent: bool = False

    @classmethod
    def warn_on_change(
        cls, status: Mapping[str, Any], conditions: tuple[Desired, ...], problem: Desired | None, **more: Any
    ) -> "Outcome":
        """The status, and a Warning Event of ``problem`` (what the user must fix) when it is new."""
        warning = (("Warning", problem.reason, problem.message),) if problem is not None else ()
        return cls(status=status, conditions=conditions, on_change=warning, **more)
