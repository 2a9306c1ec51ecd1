"""What the run is doing and why, in one reason and one message (pure): ``status.reason`` and
``status.message``, which ``kubectl get trainers`` shows. The phase says where the run is; this
says what it waits for: the gates, capacity (with the scheduler's word), an image, its pods to
start, a restart, or how it ended."""

from collections.abc import Sequence
from dataclasses import replace

from trainerop_common.api.base import Condition
from trainerop_common.conditions import Desired, find

from .run import Decision, Observed
from .views import PodView

MAX_MESSAGE = 1024  # status.message's bound
STARTING = "Starting"
# A message that starts with a pod count ("3 of 5 pods ...") is written with the pod counts, at
# most every --status-counts-seconds (policy.counts_hold): pods failing to schedule one by one
# make one write, not one each.


def summarized(obs: Observed, decision: Decision) -> Decision:
    """The decision with the summary in the status it writes (none when it writes no status)."""
    phase = decision.status.get("phase")
    if not phase:
        return decision
    reason, message = summary(str(phase), decision.conditions, obs.conditions, obs.pods)
    return replace(decision, status={**decision.status, "reason": reason, "message": message[:MAX_MESSAGE]})


def summary(
    phase: str, said: Sequence[Desired], before: Sequence[Condition], pods: Sequence[PodView]
) -> tuple[str, str]:
    """The first that applies: how a finished run ended, a suspension or restart, what holds its
    pods back (a refused override, the gates, no node, a container that cannot start), or how far
    it is (running, starting)."""
    own = {c.type: c for c in said}

    def condition(type_: str) -> tuple[str, str] | None:
        c = own.get(type_) or find(before, type_)
        return (c.reason, c.message) if c is not None else None

    if phase in ("Succeeded", "Failed", "Suspended", "Restarting"):
        return condition(phase) or (phase, "")
    created = own.get("Created")
    if created is not None and created.reason in ("WaitingForGates", "OverrideNotAllowed", "InvalidModel"):
        return created.reason, created.message
    running = condition("Running") or (phase, "")
    if phase == "Running":
        return "Running", running[1]
    live = [p for p in pods if not p.deleting and not p.finished]
    held = held_back(live)
    if held is not None:
        return held
    if created is not None and created.status == "False":
        return created.reason, created.message
    return STARTING, running[1]


def held_back(live: Sequence[PodView]) -> tuple[str, str] | None:
    """Pods no node takes (the scheduler's message), or whose container cannot start (the
    kubelet's reason): what a person has to act on or wait for."""
    unplaced = [p for p in live if p.unschedulable]
    if unplaced:
        return "Unschedulable", f"{len(unplaced)} of {len(live)} pods unschedulable: {unplaced[0].unschedulable}"
    stuck = [p for p in live if p.waiting]
    if stuck:
        first = stuck[0]
        return first.waiting.split(":", 1)[0], f"{len(stuck)} of {len(live)} pods cannot start: {first.waiting}"
    return None
