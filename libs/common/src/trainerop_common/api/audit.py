"""The ``AuditLog`` kind: one immutable record of something the operator did."""

from typing import Literal

from pydantic import Field

from .base import K8sModel, ObjectName, cel

AuditAction = Literal[
    "Created",
    "Admitted",
    "Started",
    "Scaled",
    "Restarted",
    "Suspended",
    "Resumed",
    "Checkpointed",
    "Succeeded",
    "Failed",
    "Deleted",
]


class AuditSubject(K8sModel):
    name: ObjectName
    uid: str = Field(default="", max_length=64)


class AuditLogSpec(K8sModel):
    trainer: AuditSubject
    action: AuditAction
    actor: str = Field(min_length=1, max_length=256, description="Who did it (controller or user).")
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=4096)
    time: str = Field(json_schema_extra={"format": "date-time"})
    generation: int = Field(default=0, ge=0)
    details: dict[str, str] | None = None


class AuditLog(K8sModel):
    spec: AuditLogSpec = Field(
        json_schema_extra={"x-kubernetes-validations": [cel("self == oldSelf", "AuditLog records are immutable")]}
    )
