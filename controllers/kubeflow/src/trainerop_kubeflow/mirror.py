"""A job's status as upstream shapes it, from its Trainer's (pure; docs/kubeflow.md).

Conditions follow upstream's rules, so ``kubectl get pytorchjobs`` (whose State column is the last
condition's type) reads as it does under the Kubeflow operator: a condition is appended when its
type is new or its status or reason changes, and moved to the end; Running and Restarting exclude
each other; Succeeded or Failed turns Running False; nothing changes after Failed. Reasons are
``<Kind><What>`` (``PyTorchJobRunning``) and messages upstream's.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainerop_common.contracts import KUBEFLOW_JOB_NAME_LABEL, KUBEFLOW_REPLICA_TYPE_LABEL

from .kinds import JobKind

Condition = dict[str, Any]
# How long a change of a job's replica counts or start time alone (its pods starting, ending) waits
# for a change of its conditions or completion, which is written at once with the counts as they are.
COUNTS_WAIT_SECONDS = 5.0


def set_condition(conditions: Sequence[Condition], new: Condition) -> list[Condition]:
    """Upstream's setCondition: ``new`` appended last, or nothing when it says nothing new."""
    current = list(conditions)
    if any(c["type"] == "Failed" and c["status"] == "True" for c in current):
        return current  # a failed job stays as it failed
    same = next((c for c in current if c["type"] == new["type"]), None)
    if same is not None and (same["status"], same.get("reason")) == (new["status"], new.get("reason")):
        return current
    if same is not None and same["status"] == new["status"]:
        new = {**new, "lastTransitionTime": same.get("lastTransitionTime", new["lastTransitionTime"])}
    exclusive = {"Running": "Restarting", "Restarting": "Running"}.get(new["type"])
    kept = []
    for c in current:
        if c["type"] in (new["type"], exclusive):
            continue
        if new["type"] in ("Succeeded", "Failed") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    return [*kept, new]


@dataclass(frozen=True)
class Job:
    """The job being mirrored: its kind, name and the replica types it asks for."""

    kind: JobKind
    namespace: str
    name: str
    types: tuple[str, ...]

    def condition(self, type_: str, status: str, what: str, message: str, now: str) -> Condition:
        return {
            "type": type_,
            "status": status,
            "reason": f"{self.kind.kind}{what}",
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }


def _restart_message(job: Job, replicas: Mapping[str, Mapping[str, Any]]) -> str:
    failed = [(job.kind.replica_type(role) or role, int(r.get("failed") or 0)) for role, r in replicas.items()]
    type_, count = max(failed, key=lambda f: f[1], default=("Worker", 0))
    return f"{job.kind.kind} {job.name} is restarting because {max(count, 1)} {type_} replica(s) failed."


def phase_conditions(job: Job, trainer_status: Mapping[str, Any], now: str) -> list[Condition]:
    """The conditions the Trainer's phase says, in the order upstream would set them."""
    kind, full = job.kind.kind, f"{job.namespace}/{job.name}"
    phase = trainer_status.get("phase") or "Pending"
    replicas = (trainer_status.get("topology") or {}).get("replicas") or {}
    if phase == "Running":
        return [job.condition("Running", "True", "Running", f"{kind} {full} is running.", now)]
    if phase == "Restarting":
        return [job.condition("Restarting", "True", "Restarting", _restart_message(job, replicas), now)]
    if phase == "Succeeded":
        return [job.condition("Succeeded", "True", "Succeeded", f"{kind} {full} successfully completed.", now)]
    if phase == "Failed":
        why = trainer_status.get("message") or "its Trainer failed"
        return [job.condition("Failed", "True", "Failed", f"{kind} {full} is failed: {why}", now)]
    if phase == "Suspended":
        said = f"{kind} {job.name} is suspended."
        return [
            job.condition("Running", "False", "Suspended", said, now),
            job.condition("Suspended", "True", "Suspended", said, now),
        ]
    return []


# Upstream's count of each replica type: its running pods are ``active`` (pending ones are not
# counted), its succeeded and failed ones; the Trainer's count of each (its ``active`` counts a
# pending pod, its ``ready`` the running and ready ones).
UPSTREAM_COUNTS = {"active": "ready", "succeeded": "succeeded", "failed": "failed"}


def replica_statuses(job: Job, trainer_status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Counts per replica type, and the selector of its pods (upstream leaves a zero out)."""
    replicas = (trainer_status.get("topology") or {}).get("replicas") or {}
    out = {}
    for type_ in job.types:
        role = job.kind.roles[type_]
        counts = replicas.get(role) or {}
        entry: dict[str, Any] = {k: counts[ours] for k, ours in UPSTREAM_COUNTS.items() if counts.get(ours)}
        entry["selector"] = f"{KUBEFLOW_JOB_NAME_LABEL}={job.name},{KUBEFLOW_REPLICA_TYPE_LABEL}={role}"
        out[type_] = entry
    return out


def job_status(
    job: Job, previous: Mapping[str, Any] | None, trainer_status: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """The job's status once its Trainer exists: ``previous`` with what the Trainer now says.
    lastReconcileTime moves only with a change, so a resync of an unchanged job writes nothing."""
    previous = dict(previous or {})
    conditions = list(previous.get("conditions") or ())
    created = f"{job.kind.kind} {job.name} is created."
    wanted = [job.condition("Created", "True", "Created", created, now), *phase_conditions(job, trainer_status, now)]
    was_suspended = any(c["type"] == "Suspended" and c["status"] == "True" for c in conditions)
    if was_suspended and trainer_status.get("phase") not in (None, "Suspended"):
        resumed = f"{job.kind.kind} {job.name} is resumed."
        wanted.insert(1, job.condition("Suspended", "False", "Resumed", resumed, now))
    for condition in wanted:
        conditions = set_condition(conditions, condition)
    progress = trainer_status.get("progress") or {}
    status: dict[str, Any] = {
        "conditions": conditions,
        "replicaStatuses": replica_statuses(job, trainer_status),
        "startTime": progress.get("startTime") or previous.get("startTime"),
        "completionTime": progress.get("completionTime") or previous.get("completionTime"),
    }
    status = {k: v for k, v in status.items() if v is not None}
    unchanged = {k: previous.get(k) for k in status} == status and set(previous) - {"lastReconcileTime"} <= set(status)
    status["lastReconcileTime"] = previous.get("lastReconcileTime") if unchanged else now
    return {k: v for k, v in status.items() if v is not None}


def counts_wait(
    previous: Mapping[str, Any], status: Mapping[str, Any], now: datetime, held_since: datetime | None
) -> float:
    """Seconds ``status`` waits before it is written: none unless all it changes of ``previous`` is
    the replica counts or the start time, which wait COUNTS_WAIT_SECONDS from when such a change
    was first held (``held_since``; None: it is held from now) for a change of conditions to carry
    them. A starting job's counts move as each pod starts; written each time, they cost the API
    server a status write per move (3.98 writes a job to Running at N = 1000: bench/results)."""
    moving = ("replicaStatuses", "startTime", "lastReconcileTime")
    if {k: v for k, v in status.items() if k not in moving} != {k: v for k, v in previous.items() if k not in moving}:
        return 0.0
    waited = (now - held_since).total_seconds() if held_since is not None else 0.0
    return max(0.0, COUNTS_WAIT_SECONDS - waited)


def refused_status(job: Job, previous: Mapping[str, Any] | None, problems: Sequence[str], now: str) -> dict[str, Any]:
    """A job no Trainer can carry: Failed, reason ``<Kind>FailedValidation``, the problems named,
    finished now (its ttlSecondsAfterFinished counts from then)."""
    said = f"{job.kind.kind} {job.name} failed validation because {'; '.join(problems)}"
    before = dict(previous or {})
    failed = job.condition("Failed", "True", "FailedValidation", said, now)
    conditions = set_condition(before.get("conditions") or (), failed)
    if conditions == list(before.get("conditions") or ()):
        return before
    return {**before, "conditions": conditions, "completionTime": before.get("completionTime") or now}
