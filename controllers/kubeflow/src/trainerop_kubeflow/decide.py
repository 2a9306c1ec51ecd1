"""What the kubeflow controller does with one job (pure; docs/kubeflow.md): leave it to another
controller, refuse it, make or update its Trainer, write its status, delete it past its TTL."""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainerop_common.api.kubeflow import UPSTREAM_MANAGER
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.names import field_manager
from trainerop_common.outcome import soonest

from .convert import problems, replica_specs, to_trainer
from .kinds import JobKind
from .mirror import Job, counts_wait, job_status, refused_status

# runPolicy.managedBy naming this operator: its kubeflow controller acts on the job even where
# upstream's operator runs.
OUR_MANAGER = "trainer.operator.kubeflow.org/kubeflow"
TAKEN_RECHECK_SECONDS = 30.0  # a Trainer of the job's name that another owns: looked at again
# On a job's Trainer: the digest of the manifest last applied (decide.applied_hash).
APPLIED_ANNOTATION = "trainer.operator.kubeflow.org/applied-job-hash"

Event = tuple[str, str, str]


@dataclass(frozen=True)
class Observed:
    kind: JobKind
    job: Mapping[str, Any]
    trainer: Mapping[str, Any] | None  # the Trainer named like the job, if one exists
    upstream_running: bool  # Kubeflow's own operator holds its leader Lease
    now: datetime
    # The digest of the manifest this controller last applied for the job (its Trainer's watch may
    # not have brought that Trainer yet): applied already, not again. None: none since it started.
    applied: str | None = None
    # Since when a change of the job's counts alone has been held (mirror.counts_wait); None: none.
    counts_held_since: datetime | None = None


@dataclass(frozen=True)
class Decision:
    trainer: dict[str, Any] | None = None  # the Trainer to apply
    status: dict[str, Any] | None = None  # the job's status to write (None: as it is)
    delete: bool = False  # the job, past ttlSecondsAfterFinished
    requeue_after: float | None = None
    events: tuple[Event, ...] = field(default_factory=tuple)
    counts_held: bool = False  # a change of the counts alone waits (Observed.counts_held_since)


def applied_hash(trainer: Mapping[str, Any]) -> str:
    """A digest of the Trainer manifest as the controller applies it (without this annotation)."""
    text = json.dumps(trainer, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_hash(trainer: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its digest as an annotation: a Trainer that carries it needs no apply. A
    field the job no longer sets changes the digest, so the apply (server-side: fields this
    controller applied before and leaves out now are removed) takes it out of the Trainer too."""
    meta = trainer["metadata"]
    annotations = {**(meta.get("annotations") or {}), APPLIED_ANNOTATION: applied_hash(trainer)}
    return {**trainer, "metadata": {**meta, "annotations": annotations}}


def status_by_other(job: Mapping[str, Any]) -> bool:
    """Whether another controller has written the job's status (Kubeflow's own operator)."""
    entries = job.get("metadata", {}).get("managedFields") or ()
    return any(e.get("subresource") == "status" and e.get("manager") != field_manager("kubeflow") for e in entries)


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
    if meta.get("deletionTimestamp"):  # going (its Trainer with it): nothing to make or write
        return Decision()
    now = rfc3339(o.now)
    job = Job(o.kind, meta.get("namespace", ""), meta["name"], tuple(replica_specs(o.kind, o.job)))
    previous = o.job.get("status") or {}
    ours = o.trainer is not None and owned_by(o.trainer, o.job)
    # A job this controller started stays its own; one another controller has started stays theirs.
    if not ours and (leave_to_other(o.job, o.upstream_running) or status_by_other(o.job)):
        return Decision()
    if o.trainer is not None and not ours:
        why = f"Trainer {meta['name']} exists and is not this {o.kind.kind}'s; rename the job or delete that Trainer"
        return Decision(requeue_after=TAKEN_RECHECK_SECONDS, events=(("Warning", "TrainerNameTaken", why),))
    found = problems(o.kind, o.job)
    if found and not ours:
        status = refused_status(job, previous, found, now)
        said = (("Warning", f"{o.kind.kind}FailedValidation", "; ".join(found)),)
        return Decision(status=status if status != previous else None, events=said if status != previous else ())
    trainer_status = (o.trainer or {}).get("status") or {}
    if finished(previous):
        left = ttl_left(o.job, o.now)
        if left is not None and left <= 0:
            return Decision(delete=True)
        status = job_status(job, previous, trainer_status, now) if o.trainer is not None else previous
        return Decision(status=status if status != previous else None, requeue_after=left)
    # An update the Trainer cannot carry leaves it running as it was, and says why.
    refused = (("Warning", f"{o.kind.kind}UpdateRefused", "; ".join(found)),) if found else ()
    wanted = None if found else with_hash(to_trainer(o.kind, o.job))
    annotations = ((o.trainer or {}).get("metadata") or {}).get("annotations") or {}
    current = wanted is not None and wanted["metadata"]["annotations"][APPLIED_ANNOTATION] in (
        annotations.get(APPLIED_ANNOTATION),
        o.applied,
    )
    status = job_status(job, previous, trainer_status, now)
    wait = counts_wait(previous, status, o.now, o.counts_held_since) if status != previous else 0.0
    left = ttl_left({**o.job, "status": status}, o.now) if finished(status) else None
    return Decision(
        trainer=None if current else wanted,
        status=status if status != previous and not wait else None,
        requeue_after=soonest(left, wait or None),
        events=refused,
        counts_held=wait > 0,
    )
