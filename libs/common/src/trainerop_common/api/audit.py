"""The ``AuditLog`` kind: one immutable record of an action on a training workload.

Its fields follow the Kubernetes audit Event (``audit.k8s.io/v1``: auditID, stage, verb, user,
objectRef, requestReceivedTimestamp, stageTimestamp) so that a SIEM that reads the API server's
audit log reads these too; ``action``, ``reason``, ``message``, ``generation`` and ``details`` say
what the request meant for the workload.
"""

from typing import Annotated, Literal

from pydantic import Field

from .base import K8sModel, cel

AuditAction = Literal[
    # user actions, observed by the audit webhook
    "Created",
    "Updated",
    "Scaled",
    "Suspended",
    "Resumed",
    "Deleted",
    # operator actions, read from the status the controllers share
    "Admitted",
    "Started",
    "Restarted",
    "Checkpointed",
    "Succeeded",
    "Failed",
    # the audit controller's own: retention, and the seals that make tampering evident
    "Pruned",
    "Sealed",
]
AuditStage = Literal["RequestReceived", "ResponseComplete"]


class AuditUser(K8sModel):
    """Who acted, as the API server authenticated them."""

    username: str = Field(min_length=1, max_length=512, description="The name the API server authenticated.")
    uid: str | None = Field(default=None, max_length=128, description="A unique id of the user, when known.")
    groups: list[Annotated[str, Field(max_length=256)]] | None = Field(
        default=None, max_length=64, description="The groups the user belongs to."
    )


class AuditObjectRef(K8sModel):
    """What was acted on."""

    resource: str = Field(min_length=1, max_length=63, description="e.g. trainers, trainingprofiles")
    namespace: str | None = Field(default=None, max_length=63, description="Unset for a cluster-scoped object.")
    name: str | None = Field(default=None, max_length=253, description="Unset for a collection.")
    uid: str | None = Field(default=None, max_length=64, description="metadata.uid of the object, when known.")
    api_group: str | None = Field(default=None, max_length=253, description="e.g. trainer.operator.kubeflow.org")
    api_version: str | None = Field(default=None, max_length=63, description="e.g. v1")
    subresource: str | None = Field(default=None, max_length=63, description="e.g. scale, status")


class AuditSeal(K8sModel):
    """What a seal covers: the hashes of the records written since the previous seal, and that
    seal's name and hash, so the seals form a chain (trainerop_audit.seal; docs/audit.md)."""

    sequence: int = Field(ge=1, description="The seal's place in the chain, from 1.")
    previous: str | None = Field(
        default=None, max_length=253, description="The previous seal's name; unset: the first."
    )
    previous_hash: str | None = Field(
        default=None, min_length=64, max_length=64, description="The sha256 of the previous seal (hex)."
    )
    records: dict[str, Annotated[str, Field(min_length=64, max_length=64)]] = Field(
        json_schema_extra={"maxProperties": 5000},
        description="Record name -> sha256 of its name, uid, creation time, spec.",
    )


class AuditLogSpec(K8sModel):
    """The record, immutable once written."""

    level: Literal["Metadata"] = Field(
        default="Metadata", description="Metadata: who did what to which object, without request or response bodies."
    )
    audit_id: str = Field(
        alias="auditID",
        min_length=1,
        max_length=64,
        description="The request's auditID in the API server's audit log; for an action no request stands for, a "
        "stable ID the audit controller derives.",
    )
    stage: AuditStage = Field(
        description="RequestReceived: a user's request, recorded when it reached admission (after "
        "authentication and authorization, before it was stored). ResponseComplete: an action the "
        "stored status shows has happened."
    )
    verb: str = Field(min_length=1, max_length=32, description="create, update, patch, delete")
    user: AuditUser
    object_ref: AuditObjectRef
    request_received_timestamp: str = Field(
        json_schema_extra={"format": "date-time"}, description="When the request reached the API server."
    )
    stage_timestamp: str = Field(
        json_schema_extra={"format": "date-time"}, description="When the stage was reached (the record written)."
    )
    action: AuditAction = Field(
        description="What happened to the workload: Created, Updated, Scaled, Suspended, Resumed, Deleted (a "
        "user's); Admitted, Started, Restarted, Checkpointed, Succeeded, Failed (the operator's); Pruned, Sealed "
        "(the audit controller's)."
    )
    reason: str = Field(default="", max_length=1024, description="CamelCase reason code of the action.")
    message: str = Field(default="", max_length=4096, description="The action in words, for a person.")
    generation: int = Field(default=0, ge=0, description="The object's metadata.generation the action concerns.")
    details: dict[str, Annotated[str, Field(max_length=1024)]] | None = Field(
        default=None, max_length=32, description="Further facts of the action, name -> value."
    )
    seal: AuditSeal | None = Field(default=None, description="Set on a seal (action Sealed).")
    deleted_records: list[Annotated[str, Field(max_length=253)]] | None = Field(
        default=None, max_length=100000, description="The records a retention pass deleted (action Pruned)."
    )


class AuditLog(K8sModel):
    spec: AuditLogSpec = Field(
        json_schema_extra={"x-kubernetes-validations": [cel("self == oldSelf", "AuditLog records are immutable")]}
    )
