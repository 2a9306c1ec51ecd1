"""The audit controller's decision core: pure, table-tested, no I/O.

It decides which AuditLog records a Trainer is missing (today: the record of its creation,
one per Trainer UID) and the ``status.audit`` summary. Records carry no owner reference, so
the trail outlives the Trainer.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainerop_common.api import API_VERSION, GROUP

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
    wanted = created_record(t)
    have = {r["metadata"]["name"] for r in mine}
    create = () if wanted["metadata"]["name"] in have else (wanted,)
    # Count what is about to be created too, so the summary is written once, not twice.
    trail = [*mine, *create]
    latest = max(trail, key=lambda r: (r["spec"].get("time", ""), r["metadata"]["name"]), default=None)
    status = {"audit": {"records": len(trail), **({"lastRecord": latest["metadata"]["name"]} if latest else {})}}
    return Decision(create=create, status=status)
