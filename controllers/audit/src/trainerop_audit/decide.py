"""The audit controller's decision core: pure, table-tested, no I/O.

It decides which AuditLog records a Trainer is missing and the ``status.audit`` summary: the
record of its creation (one per Trainer UID), and one per operator action read from the status
the controllers share — each condition's transition to the state that means an action (quota
admission, start, restart, suspension, resumption, success, failure) and each newly committed
checkpoint — with the identity of the controller that owns that condition. Record names are made
from what they record, so a record is written once however often the Trainer is seen, and again
after a restart of this controller nothing is written twice. Records carry no owner reference, so
the trail outlives the Trainer.
"""

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainerop_common.api import API_VERSION, GROUP
from trainerop_common.api.base import Condition

OWNED_FIELDS = ("audit",)
TRAINER_LABEL = f"{GROUP}/trainer-name"
UID_LABEL = f"{GROUP}/trainer-uid"


@dataclass(frozen=True)
class TrainerFacts:
    namespace: str
    name: str
    uid: str
    generation: int
    creator: str  # the field manager that created the spec, e.g. kubectl-client-side-apply
    created: str  # metadata.creationTimestamp
    conditions: Sequence[Condition] = ()
    checkpoint: str | None = None  # status.checkpoint.latest
    checkpoint_time: str | None = None  # status.checkpoint.lastCommitTime
    restarts: int = 0  # pods replaced after a failure, all roles (status.topology.replicas)
    last_failure: str | None = None  # the latest of their lastFailureTime


OPERATOR = "system:serviceaccount:trainer-operator-system:trainer-operator-"
# (condition type, status, reason or None for any) -> (action, the controller that acts)
ACTIONS: dict[tuple[str, str, str | None], tuple[str, str]] = {
    ("QuotaAdmitted", "True", "Admitted"): ("Admitted", "quota"),
    ("QuotaAdmitted", "True", "Renegotiated"): ("Admitted", "quota"),
    ("Running", "True", None): ("Started", "trainer"),
    ("Suspended", "True", None): ("Suspended", "trainer"),
    ("Suspended", "False", "Resumed"): ("Resumed", "trainer"),
    ("Succeeded", "True", None): ("Succeeded", "trainer"),
    ("Failed", "True", None): ("Failed", "trainer"),
}


def _short(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


def record(
    t: TrainerFacts, action: str, actor: str, reason: str, message: str, time: str, generation: int, key: str = ""
) -> dict[str, Any]:
    """An AuditLog named from what it records (``key``, else its time and reason), so it is written once."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AuditLog",
        "metadata": {
            "name": f"{t.name}-{action.lower()}-{_short(t.uid, action, key or f'{time}/{reason}')}",
            "namespace": t.namespace,
            "labels": {TRAINER_LABEL: t.name, UID_LABEL: t.uid},
        },
        "spec": {
            "trainer": {"name": t.name, "uid": t.uid},
            "action": action,
            "actor": actor,
            "reason": reason,
            "message": message[:4096],
            "time": time,
            "generation": generation,
        },
    }


def operator_records(t: TrainerFacts) -> list[dict[str, Any]]:
    """One record per action the controllers' status shows has happened."""
    out = []
    for c in t.conditions:
        found = ACTIONS.get((c.type, c.status, c.reason)) or ACTIONS.get((c.type, c.status, None))
        if found is None:
            continue
        action, controller = found
        out.append(
            record(t, action, OPERATOR + controller, c.reason, c.message, c.last_transition_time, c.observed_generation)
        )
    if t.restarts and t.last_failure:  # one record per replacement count: the Restarting condition
        # stays True through several failures in a row
        message = f"pod replaced after a failure (restart {t.restarts})"
        restarted = record(
            t,
            "Restarted",
            OPERATOR + "trainer",
            "PodFailed",
            message,
            t.last_failure,
            t.generation,
            key=str(t.restarts),
        )  # named by the count, not the time
        out.append(restarted)
    if t.checkpoint and t.checkpoint_time:
        message = f"checkpoint {t.checkpoint} committed"
        out.append(
            record(t, "Checkpointed", OPERATOR + "checkpoint", "Committed", message, t.checkpoint_time, t.generation)
        )
    return out


@dataclass(frozen=True)
class Decision:
    create: tuple[dict[str, Any], ...]
    status: dict[str, Any]


def creator_of(managed_fields: Sequence[Mapping[str, Any]] | None) -> str:
    for entry in managed_fields or ():
        if entry.get("subresource") != "status" and entry.get("manager"):
            return str(entry["manager"])
    return "unknown"


def created_record(t: TrainerFacts) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "AuditLog",
        "metadata": {
            "name": f"{t.name}-created-{t.uid[:8]}",
            "namespace": t.namespace,
            "labels": {TRAINER_LABEL: t.name, UID_LABEL: t.uid},
        },
        "spec": {
            "trainer": {"name": t.name, "uid": t.uid},
            "action": "Created",
            "actor": t.creator,
            "reason": "TrainerCreated",
            "message": f"Trainer {t.name} created",
            "time": t.created,
            "generation": t.generation if t.generation else 1,
        },
    }


def decide(t: TrainerFacts, records: Sequence[Mapping[str, Any]]) -> Decision:
    mine = [r for r in records if r.get("spec", {}).get("trainer", {}).get("uid") == t.uid]
    have = {r["metadata"]["name"] for r in mine}
    create = tuple(r for r in [created_record(t), *operator_records(t)] if r["metadata"]["name"] not in have)
    # Count what is about to be created too, so the summary is written once, not twice.
    trail = [*mine, *create]
    latest = max(trail, key=lambda r: (r["spec"].get("time", ""), r["metadata"]["name"]), default=None)
    status = {"audit": {"records": len(trail), **({"lastRecord": latest["metadata"]["name"]} if latest else {})}}
    return Decision(create=create, status=status)
