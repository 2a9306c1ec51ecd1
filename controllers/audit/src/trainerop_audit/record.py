"""The shape of one AuditLog record (the Kubernetes audit Event's fields) and how it is named.

Every record is named from what it records, so that writing it twice (a retried request, a
restarted controller, two replicas) creates it once.
"""

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from trainerop_common.api import API_VERSION, GROUP
from trainerop_common.api.kubeflow import KUBEFLOW_GROUP
from trainerop_common.contracts import AUDIT_TRAINER_LABEL, TRAINER_UID_LABEL
from trainerop_common.names import OPERATOR_NAMESPACE, child_name, service_account_user

# A record's labels: the Trainer it is about (name and uid), the kind of object it records.
TRAINER_LABEL = AUDIT_TRAINER_LABEL
RESOURCE_LABEL = f"{GROUP}/audited-resource"
IDENTITY = "identity"  # the key of a record's details that says how its requester is known
SERVICE_ACCOUNT_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{OPERATOR_NAMESPACE}",
    "system:authenticated",
)


def short_hash(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


def derived_audit_id(*parts: str) -> str:
    """A stable auditID for a record that no single API request stands for."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{GROUP}/audit/" + "/".join(parts)))


def record_name(object_name: str, action: str, *key: str) -> str:
    return child_name(object_name, action.lower(), short_hash(*key))


def operator_user(controller: str) -> dict[str, Any]:
    return {"username": service_account_user(controller), "groups": list(SERVICE_ACCOUNT_GROUPS)}


def trainer_ref(namespace: str, name: str, uid: str, subresource: str | None = None) -> dict[str, Any]:
    ref = {"resource": "trainers", "namespace": namespace, "name": name, "uid": uid, "apiGroup": GROUP}
    ref["apiVersion"] = API_VERSION.split("/")[1]
    if subresource:
        ref["subresource"] = subresource
    return ref


def labels_for(ref: Mapping[str, Any]) -> dict[str, str]:
    labels = {RESOURCE_LABEL: str(ref["resource"])}
    if ref["resource"] == "trainers" and ref.get("name"):
        labels[TRAINER_LABEL] = str(ref["name"])[:63]
        if ref.get("uid"):
            labels[TRAINER_UID_LABEL] = str(ref["uid"])
    return labels


def audit_record(
    *,
    name: str,
    namespace: str,
    audit_id: str,
    stage: str,
    verb: str,
    user: Mapping[str, Any],
    object_ref: Mapping[str, Any],
    received: str,
    stamp: str,
    action: str,
    reason: str,
    message: str,
    generation: int = 0,
    details: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An AuditLog. It carries no owner reference, so the trail outlives what it records."""
    spec: dict[str, Any] = {
        "level": "Metadata",
        "auditID": audit_id,
        "stage": stage,
        "verb": verb,
        "user": dict(user),
        "objectRef": dict(object_ref),
        "requestReceivedTimestamp": received,
        "stageTimestamp": stamp,
        "action": action,
        "reason": reason[:1024],
        "message": message[:4096],
        "generation": max(generation, 0),
    }
    if details:
        spec["details"] = {k: v[:1024] for k, v in details.items()}
    return {
        "apiVersion": API_VERSION,
        "kind": "AuditLog",
        "metadata": {"name": name, "namespace": namespace, "labels": labels_for(object_ref)},
        "spec": spec,
    }


def subject_uid(record: Mapping[str, Any]) -> str | None:
    """The uid of the Trainer a record is about (also in records of the shape before audit Events)."""
    spec = record.get("spec", {})
    ref = spec.get("objectRef") or {}
    if ref:
        return ref.get("uid") if ref.get("resource") == "trainers" else None
    return (spec.get("trainer") or {}).get("uid")


def about_uid(record: Mapping[str, Any]) -> str | None:
    """The uid of the object a record is about, whatever its kind (a Trainer, a profile, a Kubeflow job)."""
    spec = record.get("spec", {})
    ref = spec.get("objectRef") or {}
    return ref.get("uid") if ref else (spec.get("trainer") or {}).get("uid")


def job_creation(record: Mapping[str, Any]) -> bool:
    """Whether a record is of a user's creation of a Kubeflow job (the Trainer the kubeflow
    controller makes for the job names that user: decide.creation_on_behalf)."""
    spec = record.get("spec", {})
    return spec.get("action") == "Created" and (spec.get("objectRef") or {}).get("apiGroup") == KUBEFLOW_GROUP


def who_asked(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a record's spec says who asked: the user, and how they were known (details.identity)."""
    out: dict[str, Any] = {"user": spec.get("user")}
    if identity := (spec.get("details") or {}).get(IDENTITY):
        out["details"] = {IDENTITY: identity}
    return out


def stamp_of(record: Mapping[str, Any]) -> str:
    """When it happened; for a record of the earlier shape its ``time``, else when it was stored."""
    spec = record.get("spec", {})
    return str(
        spec.get("stageTimestamp") or spec.get("time") or record.get("metadata", {}).get("creationTimestamp") or ""
    )
