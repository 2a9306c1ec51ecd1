"""What the trainer's status says of a run (pure): the phase, counts per role, progress from the
heartbeats."""

from collections.abc import Mapping, Sequence
from typing import Any

from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import Phase, ProgressStatus, ReplicaStatus, TrainerSpec
from trainerop_common.clock import whole_seconds
from trainerop_common.conditions import Desired, find
from trainerop_common.contracts import REPLICA_TYPE_LABEL, TRAINER_NAME_LABEL
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
    previous: ProgressStatus | None, leases: Mapping[str, LeaseView], start: str | None, completion: str | None
) -> ProgressStatus:
    """When the run started and finished, and the furthest epoch and step its heartbeats reported."""
    previous = previous or ProgressStatus()
    beats = [lease for lease in leases.values() if lease.renew_time]
    return ProgressStatus(
        start_time=start,
        completion_time=completion,
        epoch=max((lease.epoch for lease in beats), default=previous.epoch),
        step=max((lease.step for lease in beats), default=previous.step),
        last_heartbeat_time=max((whole_seconds(str(lease.renew_time)) for lease in beats), default=None)
        or previous.last_heartbeat_time,
    )


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
