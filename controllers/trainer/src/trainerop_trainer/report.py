"""What the trainer's status says of a run (pure): the phase, counts per role, progress from the
heartbeats."""

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import Phase, ProgressStatus, ReplicaStatus, TrainerSpec
from trainerop_common.clock import parse_time, rfc3339, whole_seconds
from trainerop_common.conditions import Desired, find
from trainerop_common.contracts import MAX_METRICS, REPLICA_TYPE_LABEL, TRAINER_NAME_LABEL
from trainerop_common.topology import ROLES, role_counts

from .views import History, LeaseView, PodView, RoleHistory


def worker_selector(name: str) -> str:
    return f"{TRAINER_NAME_LABEL}={name},{REPLICA_TYPE_LABEL}=worker"


def counts(spec: TrainerSpec, pods: Sequence[PodView], history: History) -> dict[str, ReplicaStatus]:
    desired = role_counts(spec)
    out: dict[str, ReplicaStatus] = {}
    for role in ROLES:
        mine = [p for p in pods if p.role == role and not p.deleting]
        past = history.get(role, RoleHistory())
        if not desired[role] and not mine and not past.restarts:
            continue
        out[role] = ReplicaStatus(
            desired=desired[role],
            active=sum(not p.finished for p in mine),
            ready=sum(p.ready and p.phase == "Running" for p in mine),
            succeeded=sum(p.phase == "Succeeded" for p in mine),
            failed=sum(p.phase == "Failed" for p in mine),
            restarts=past.restarts,
            last_failure_time=past.last_failure,
            recent_failures=past.recent,
            counted_failures=sorted(past.counted) or None,
        )
    return out


def progress(
    previous: ProgressStatus | None,
    leases: Mapping[str, LeaseView],
    start: str | None,
    completion: str | None,
    epochs: int | None,
    phase: Phase,
) -> ProgressStatus:
    """When the run started and finished; the furthest epoch and step its heartbeats reported
    (what they last said stays when their Leases go); how much is done and, while it runs, when
    it will be at the pace the pods measured; the latest value of each metric. Without total
    steps or ``epochs`` (a Kubeflow job's), what is done is unknown: 0 until it succeeds."""
    previous = previous or ProgressStatus()
    beats = sorted((lease for lease in leases.values() if lease.renew_time), key=lambda b: (b.step, b.epoch))
    epoch = max((b.epoch for b in beats), default=previous.epoch)
    step = max((b.step for b in beats), default=previous.step)
    total = max((b.total_steps for b in beats), default=0) or previous.total_steps
    metrics = dict(previous.metrics or {}) | {name: value for b in beats for name, value in b.metrics}
    done = step / total if total else (epoch / epochs if epochs else 0.0)
    return ProgressStatus(
        start_time=start,
        completion_time=completion,
        epoch=epoch,
        step=step,
        last_heartbeat_time=max((whole_seconds(str(b.renew_time)) for b in beats), default=None)
        or previous.last_heartbeat_time,
        total_steps=total,
        percent=100 if phase == "Succeeded" else min(99, int(100 * done)),
        estimated_completion_time=completion_estimate(beats[-1], total, epochs) if beats and phase in ACTIVE else None,
        metrics=dict(sorted(metrics.items())[:MAX_METRICS]) or None,
    )


ACTIVE = ("Running", "Restarting")


def completion_estimate(furthest: LeaseView, total_steps: int | None, epochs: int | None) -> str | None:
    """The furthest heartbeat's time plus what remains at its pod's pace: the steps left when the
    total is known, else the epochs left (None: no pace measured yet, or nothing to measure
    against)."""
    if total_steps and furthest.seconds_per_step is not None:
        remaining = max(0, total_steps - furthest.step) * furthest.seconds_per_step
    elif epochs and furthest.seconds_per_epoch is not None:
        remaining = max(0, epochs - furthest.epoch) * furthest.seconds_per_epoch
    else:
        return None
    at = parse_time(whole_seconds(str(furthest.renew_time))) + timedelta(seconds=round(min(remaining, MAX_ETA)))
    return rfc3339(at)


MAX_ETA = 10 * 365 * 86400.0  # a pace that says "never" still makes a valid time


def status_section(
    name: str, spec: TrainerSpec, phase: Phase, pods: Sequence[PodView], history: History, progress: ProgressStatus
) -> dict[str, Any]:
    """The trainer's whole status section, rebuilt each time: the same shape every time (no write
    for a changed shape), and a cleared startTime (on suspension) really goes away."""
    by_role = counts(spec, pods, history)
    workers = by_role.get("worker", ReplicaStatus())
    topology: dict[str, Any] = {
        "workers": workers.active,
        "readyWorkers": workers.ready,
        "selector": worker_selector(name),
    }
    if by_role:
        topology["replicas"] = {role: c.to_k8s() for role, c in by_role.items()}
    return {"phase": phase, "topology": topology, "progress": progress.to_k8s()}


def kept(conditions: Sequence[Condition], types: Sequence[str]) -> list[Desired]:
    """The conditions of ``types`` as they are (a finished run's last word)."""
    out = []
    for t in types:
        c = find(conditions, t)
        if c is not None:
            out.append(Desired(c.type, c.status, c.reason, c.message))
    return out
