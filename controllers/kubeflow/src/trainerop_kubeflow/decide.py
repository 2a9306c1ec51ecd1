"""What the kubeflow controller does with one job (pure; docs/kubeflow.md): leave it to another
controller, refuse it, make or update its Trainer, write its status, delete it past its TTL."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainerop_common.api.kubeflow import UPSTREAM_MANAGER
from trainerop_common.clock import parse_time, rfc3339

from .convert import problems, to_trainer
from .kinds import JobKind
from .mirror import Job, job_status, refused_status

# runPolicy.managedBy naming this operator: its kubeflow controller acts on the job even where
# upstream's operator runs.
OUR_MANAGER = "trainer.operator.kubeflow.org/kubeflow"
TAKEN_RECHECK_SECONDS = 30.0  # a Trainer of the job's name that another owns: looked at again

Event = tuple[str, str, str]


@dataclass(frozen=True)
class Observed:
    kind: JobKind
    job: Mapping[str, Any]
    trainer: Mapping[str, Any] | None  # the Trainer named like the job, if one exists
    upstream_running: bool  # Kubeflow's own operator holds its leader Lease
    now: datetime


@dataclass(frozen=True)
class Decision:
    trainer: dict[str, Any] | None = None  # the Trainer to apply
    status: dict[str, Any] | None = None  # the job's status to write (None: as it is)
    delete: bool = False  # the job, past ttlSecondsAfterFinished
    requeue_after: float | None = None
    events: tuple[Event, ...] = field(default_factory=tuple)


def contains(have: Any, want: Any) -> bool:
    """Whether ``have`` (as stored: with the API server's defaults) holds everything of ``want``."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(contains(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(contains, have, want))
    return bool(have == want)


def leave_to_other(job: Mapping[str, Any], upstream_running: bool) -> str | None:
    """Why another controller acts on the job (None: it is ours)."""
    manager = ((job.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
    if manager == OUR_MANAGER:
        return None
    if manager not in (None, "", UPSTREAM_MANAGER):
        return f"spec.runPolicy.managedBy is {manager}: that controller acts on it"
    if upstream_running:
        return (
            "Kubeflow's Training Operator runs in this cluster and acts on it; set spec.runPolicy.managedBy: "
            f"{OUR_MANAGER} to have this operator run it instead"
        )
    return None


def finished(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def ttl_left(job: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until a finished job's ttlSecondsAfterFinished runs out (None: it has none)."""
    ttl = ((job.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    done = (job.get("status") or {}).get("completionTime")
    if ttl is None or not done:
        return None
    return (parse_time(done) - now).total_seconds() + float(ttl)


def owned_by(trainer: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    uid = job["metadata"].get("uid")
    refs = trainer.get("metadata", {}).get("ownerReferences") or ()
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def decide(o: Observed) -> Decision:
    meta = o.job["metadata"]
    now = rfc3339(o.now)
    specs = (o.job.get("spec") or {}).get(o.kind.specs_field) or {}
    job = Job(o.kind, meta.get("namespace", ""), meta["name"], tuple(t for t in o.kind.types if t in specs))
    previous = o.job.get("status") or {}
    if leave_to_other(o.job, o.upstream_running):
        return Decision()
    found = problems(o.kind, o.job)
    if found:
        status = refused_status(job, previous, found, now)
        said = (("Warning", f"{o.kind.kind}FailedValidation", "; ".join(found)),)
        return Decision(status=status if status != previous else None, events=said if status != previous else ())
    if o.trainer is not None and not owned_by(o.trainer, o.job):
        why = f"Trainer {meta['name']} exists and is not this {o.kind.kind}'s; rename the job or delete that Trainer"
        return Decision(requeue_after=TAKEN_RECHECK_SECONDS, events=(("Warning", "TrainerNameTaken", why),))
    trainer_status = (o.trainer or {}).get("status") or {}
    if finished(previous):
        left = ttl_left(o.job, o.now)
        if left is not None and left <= 0:
            return Decision(delete=True)
        status = job_status(job, previous, trainer_status, now) if o.trainer is not None else previous
        return Decision(status=status if status != previous else None, requeue_after=left)
    wanted = to_trainer(o.kind, o.job)
    apply = None if o.trainer is not None and contains(o.trainer, wanted) else wanted
    status = job_status(job, previous, trainer_status, now)
    left = ttl_left({**o.job, "status": status}, o.now) if finished(status) else None
    return Decision(trainer=apply, status=status if status != previous else None, requeue_after=left)
