"""The audit controller's decision core for operator actions: pure, table-tested, no I/O.

It decides which AuditLog records a Trainer is missing and the ``status.audit`` summary: one per
operator action read from the status the controllers share — each condition's transition to the
state that means an action (quota admission, start, suspension, resumption, success, failure),
each pod replacement and each newly committed checkpoint — with the identity of the controller
that owns that part of the status. ``status.audit.recorded`` remembers what was recorded, so a
record removed by retention is not written again, and a restarted controller writes nothing
twice. A Trainer the kubeflow controller made for a Kubeflow job (its controlling owner) gets a
creation record naming the user recorded for the job's creation, as soon as that record exists. A
Trainer whose creation the audit webhook did not observe (it was down, or not deployed), or whose
job's creation it did not, gets a creation record that says the requester is unknown.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from trainerop_common.api.base import Condition
from trainerop_common.api.kubeflow import KUBEFLOW_GROUP
from trainerop_common.clock import parse_time
from trainerop_common.names import child_name
from trainerop_common.outcome import StatusSection

from .record import (
    IDENTITY,
    about_uid,
    audit_record,
    derived_audit_id,
    operator_user,
    record_name,
    stamp_of,
    subject_uid,
    trainer_ref,
)

SECTION = StatusSection(("audit",))
# How long the creation of a Trainer may go without the webhook's record before this controller
# records it with an unknown requester: longer than the webhook retries a failed write.
UNOBSERVED_AFTER_SECONDS = 30.0


@dataclass(frozen=True)
class Recorded:
    """``status.audit.recorded``: what has been recorded for this Trainer already."""

    created: bool = False
    conditions: Mapping[str, str] = field(default_factory=dict)  # type -> lastTransitionTime
    restarts: int = 0
    renegotiations: int = 0
    checkpoint: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "Recorded":
        raw = raw or {}
        return cls(
            created=bool(raw.get("created")),
            conditions=dict(raw.get("conditions") or {}),
            restarts=int(raw.get("restarts") or 0),
            renegotiations=int(raw.get("renegotiations") or 0),
            checkpoint=raw.get("checkpoint"),
        )

    def to_k8s(self) -> dict[str, Any]:
        out: dict[str, Any] = {"created": self.created, "restarts": self.restarts}
        if self.renegotiations:
            out["renegotiations"] = self.renegotiations
        if self.conditions:
            out["conditions"] = dict(sorted(self.conditions.items()))
        if self.checkpoint:
            out["checkpoint"] = self.checkpoint
        return out


@dataclass(frozen=True)
class Owner:
    """The Kubeflow job a Trainer was made for: its controlling owner reference of group kubeflow.org."""

    kind: str
    name: str
    uid: str

    @property
    def job(self) -> str:
        return f"{self.kind}/{self.name}"


def kubeflow_owner(refs: Sequence[Mapping[str, Any]] | None) -> Owner | None:
    """The Kubeflow job among a Trainer's owner references that controls it, if one does."""
    for ref in refs or ():
        if ref.get("controller") and str(ref.get("apiVersion") or "").split("/")[0] == KUBEFLOW_GROUP:
            return Owner(str(ref.get("kind") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
    return None


def read_uids(trainers: Iterable[Mapping[str, Any]]) -> set[str]:
    """The uids of the objects whose records the Trainers' reconciles read: each Trainer's, and
    the Kubeflow job's it was made for (its creation record names who asked)."""
    out = set()
    for trainer in trainers:
        meta = trainer.get("metadata") or {}
        out.add(str(meta.get("uid")))
        if owner := kubeflow_owner(meta.get("ownerReferences")):
            out.add(owner.uid)
    return out


@dataclass(frozen=True)
class Observed:
    namespace: str
    name: str
    uid: str
    generation: int
    manager: str  # the field manager that created the spec, e.g. kubectl-client-side-apply
    created: str  # metadata.creationTimestamp
    conditions: Sequence[Condition] = ()
    checkpoint: str | None = None  # status.checkpoint.latest
    checkpoint_time: str | None = None  # status.checkpoint.lastCommitTime
    restarts: int = 0  # pods replaced after a failure, all roles (status.topology.replicas)
    last_failure: str | None = None  # the latest of their lastFailureTime
    renegotiations: int = 0  # status.quota.renegotiations: the admission moved or shrunk
    recorded: Recorded = Recorded()
    owner: Owner | None = None  # the Kubeflow job the kubeflow controller made this Trainer for


# (condition type, status, reason or None for any) -> (action, the controller that acts)
ACTIONS: dict[tuple[str, str, str | None], tuple[str, str]] = {
    ("QuotaAdmitted", "True", "Admitted"): ("Admitted", "quota"),  # renegotiations: counted below
    ("Running", "True", None): ("Started", "trainer"),
    ("Suspended", "True", None): ("Suspended", "trainer"),
    ("Suspended", "False", "Resumed"): ("Resumed", "trainer"),
    ("Succeeded", "True", None): ("Succeeded", "trainer"),
    ("Failed", "True", None): ("Failed", "trainer"),
}


def created_name(name: str, uid: str) -> str:
    """The creation record's name; the webhook's record of the request and this controller's
    fallback share it, so a Trainer has one."""
    return child_name(name, "created", uid[:8].lower().strip("-") or "0")


def operator_record(
    t: Observed, action: str, controller: str, reason: str, message: str, time: str, generation: int, key: str
) -> dict[str, Any]:
    """What the status written by ``controller`` shows it did: a status patch, complete."""
    return audit_record(
        name=record_name(t.name, action, t.uid, action, key),
        namespace=t.namespace,
        audit_id=derived_audit_id(t.uid, action, key),
        stage="ResponseComplete",
        verb="patch",
        user=operator_user(controller),
        object_ref=trainer_ref(t.namespace, t.name, t.uid, "status"),
        received=time,
        stamp=time,
        action=action,
        reason=reason,
        message=message,
        generation=generation,
    )


def unobserved_creation(t: Observed) -> dict[str, Any]:
    """The creation record of a Trainer whose creation (or whose Kubeflow job's) the webhook did
    not observe."""
    if t.owner is None:
        message = (
            f"Trainer {t.name} created by an unknown user (field manager {t.manager}): the audit webhook "
            "did not observe the request (not deployed, or unreachable then)"
        )
    else:
        message = (
            f"Trainer {t.name} created by the kubeflow controller for {t.owner.kind} {t.owner.name} of an "
            f"unknown user: the audit webhook did not observe the {t.owner.kind}'s creation (not deployed, "
            "or unreachable then)"
        )
    return trainer_created(t, {"username": "unknown"}, "RequestNotObserved", message, on_behalf(t.owner))


def on_behalf(owner: Owner | None, identity: str | None = None) -> dict[str, str] | None:
    """A creation record's details: on whose behalf the Trainer was made, how that user is known."""
    if owner is None:
        return None
    return {"onBehalfOf": owner.job} | ({IDENTITY: identity} if identity else {})


def creation_on_behalf(t: Observed, job_created: Mapping[str, Any]) -> dict[str, Any]:
    """The creation record of a Trainer the kubeflow controller made for a Kubeflow job: the user
    is the one ``job_created`` (the job's creation record) names, and how they were known."""
    assert t.owner is not None
    spec = job_created.get("spec") or {}
    user = dict(spec.get("user") or {"username": "unknown"})
    job = f"{t.owner.kind} {t.owner.name}"
    message = f"Trainer {t.name} created by the kubeflow controller for {job} of {user['username']}"
    details = on_behalf(t.owner, (spec.get("details") or {}).get(IDENTITY))
    return trainer_created(t, user, "CreatedOnBehalf", message, details)


def trainer_created(
    t: Observed, user: Mapping[str, Any], reason: str, message: str, details: Mapping[str, str] | None
) -> dict[str, Any]:
    """A Trainer's creation record written by this controller (not the webhook's of the request):
    named as the webhook names it, so a Trainer has one."""
    return audit_record(
        name=created_name(t.name, t.uid),
        namespace=t.namespace,
        audit_id=derived_audit_id(t.uid, "Created"),
        stage="ResponseComplete",
        verb="create",
        user=user,
        object_ref=trainer_ref(t.namespace, t.name, t.uid),
        received=t.created,
        stamp=t.created,
        action="Created",
        reason=reason,
        message=message,
        generation=1,
        details=details,
    )


def job_creation_of(t: Observed, records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The record of the creation of the Kubeflow job ``t`` was made for, if it is among ``records``."""
    if t.owner is None:
        return None
    uid = t.owner.uid
    return next((r for r in records if about_uid(r) == uid and r.get("spec", {}).get("action") == "Created"), None)


def creation_record(
    t: Observed, records: Sequence[Mapping[str, Any]], now: datetime, creation_pending: bool
) -> tuple[dict[str, Any] | None, float | None]:
    """The Trainer's creation record this controller writes now, if any, and else in how many
    seconds to look again (None: nothing to wait for). The webhook's record of the request comes
    first (``creation_pending``: still being written); then, for a Trainer made for a Kubeflow job,
    the record naming the job's creator as soon as the job's creation record exists; past
    UNOBSERVED_AFTER_SECONDS, the record with an unknown user."""
    job_created = None if creation_pending else job_creation_of(t, records)
    if job_created is not None:
        return creation_on_behalf(t, job_created), None
    age = (now - parse_time(t.created)).total_seconds()
    if age >= UNOBSERVED_AFTER_SECONDS and not creation_pending:
        return unobserved_creation(t), None
    return None, max(UNOBSERVED_AFTER_SECONDS - age, 1.0)


def operator_records(t: Observed) -> tuple[list[dict[str, Any]], Recorded]:
    """One record per action the status shows that was not recorded before, and the new watermark."""
    out = []
    seen = dict(t.recorded.conditions)
    for c in t.conditions:
        found = ACTIONS.get((c.type, c.status, c.reason)) or ACTIONS.get((c.type, c.status, None))
        if found is None or seen.get(c.type) == c.last_transition_time:
            continue
        action, controller = found
        seen[c.type] = c.last_transition_time
        key = f"{c.type}/{c.last_transition_time}/{c.reason}"
        out.append(
            operator_record(
                t, action, controller, c.reason, c.message, c.last_transition_time, c.observed_generation, key
            )
        )
    restarts = t.recorded.restarts
    if t.restarts > restarts and t.last_failure:
        # One record per replacement count seen: the Restarting condition stays True through
        # several failures in a row, so the count is what says another pod was replaced.
        message = f"pod replaced after a failure (restart {t.restarts})"
        out.append(
            operator_record(
                t, "Restarted", "trainer", "PodFailed", message, t.last_failure, t.generation, str(t.restarts)
            )
        )
        restarts = t.restarts
    renegotiations = t.recorded.renegotiations
    if t.renegotiations > renegotiations:
        # A renegotiated admission stays True (no transition): its count says it moved again.
        quota = next((c for c in t.conditions if c.type == "QuotaAdmitted"), None)
        message = quota.message if quota else f"admission renegotiated ({t.renegotiations})"
        time = quota.last_transition_time if quota else t.created
        out.append(
            operator_record(
                t, "Admitted", "quota", "Renegotiated", message, time, t.generation, f"renegotiation/{t.renegotiations}"
            )
        )
        renegotiations = t.renegotiations
    checkpoint = t.recorded.checkpoint
    if t.checkpoint and t.checkpoint_time and t.checkpoint != checkpoint:
        message = f"checkpoint {t.checkpoint} committed"
        key = f"{t.checkpoint}/{t.checkpoint_time}"
        out.append(
            operator_record(t, "Checkpointed", "checkpoint", "Committed", message, t.checkpoint_time, t.generation, key)
        )
        checkpoint = t.checkpoint
    return out, Recorded(True, seen, restarts, renegotiations, checkpoint)


@dataclass(frozen=True)
class Decision:
    create: tuple[dict[str, Any], ...]
    status: dict[str, Any]
    recheck_after: float | None = None  # seconds; waiting for the webhook's creation record


def manager_of(managed_fields: Sequence[Mapping[str, Any]] | None) -> str:
    for entry in managed_fields or ():
        if entry.get("subresource") != "status" and entry.get("manager"):
            return str(entry["manager"])
    return "unknown"


def decide(
    t: Observed, records: Sequence[Mapping[str, Any]], now: datetime, creation_pending: bool = False
) -> Decision:
    """``records``: AuditLogs, of which the Trainer's count, and its Kubeflow job's creation record
    is read (the adapter passes only those); ``creation_pending``: the webhook is still writing its
    record of the Trainer's creation."""
    mine = [r for r in records if subject_uid(r) == t.uid]
    have = {r["metadata"]["name"] for r in mine}
    wanted, recorded = operator_records(t)
    recheck = None
    if not t.recorded.created and created_name(t.name, t.uid) not in have:
        created, recheck = creation_record(t, records, now, creation_pending)
        if created is not None:
            wanted.insert(0, created)
        else:
            recorded = replace(recorded, created=False)
    create = tuple(r for r in wanted if r["metadata"]["name"] not in have)
    # Count what is about to be created too, so the summary is written once, not twice.
    trail = [*mine, *create]
    latest = max(trail, key=lambda r: (stamp_of(r), r["metadata"]["name"]), default=None)
    summary: dict[str, Any] = {"records": len(trail), "recorded": recorded.to_k8s()}
    if latest:
        summary["lastRecord"] = latest["metadata"]["name"]
    return Decision(create=create, status={"audit": summary}, recheck_after=recheck)


def summary_hold(current: Mapping[str, Any], wanted: Mapping[str, Any], held_for: float | None, delay: float) -> float:
    """Seconds ``status.audit`` may still wait before it says ``wanted`` (0: write now, or nothing
    to write). Records are created at once and idempotently by name, so a summary that lags them
    loses nothing: a restarted controller finds them and writes it. Only the records' bookkeeping
    waits, for ``delay`` seconds from when it first differed (``held_for``: seconds it has been
    held, None if it was not); notification marks are written at once (a mark lost in a crash
    would send a notice twice)."""
    if current == wanted or (current.get("notified") or {}) != (wanted.get("notified") or {}) or delay <= 0:
        return 0.0
    return max(delay - (held_for or 0.0), 0.0)
