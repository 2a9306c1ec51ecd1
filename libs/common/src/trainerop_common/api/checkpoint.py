"""The ``Checkpoint`` kind: one checkpoint of a Trainer and its state machine."""

from typing import Literal

from pydantic import Field

from .base import Conditions, K8sModel, ObjectName, cel

CheckpointPhase = Literal["Pending", "Staging", "Committed", "GarbageCollected", "Failed"]


class CheckpointSpec(K8sModel):
    """Reported by the training pods; immutable once written."""

    trainer: ObjectName = Field(description="The Trainer this checkpoint belongs to.")
    epoch: int = Field(ge=0)
    step: int = Field(default=0, ge=0)
    path: str = Field(min_length=1, max_length=4096, description="Where the checkpoint is stored.")


class CheckpointStatus(K8sModel):
    """Written by the checkpoint controller."""

    phase: CheckpointPhase | None = None
    committed_replicas: int = Field(default=0, ge=0)
    conditions: Conditions | None = None


class Checkpoint(K8sModel):
    spec: CheckpointSpec = Field(
        json_schema_extra={"x-kubernetes-validations": [cel("self == oldSelf", "a Checkpoint's spec is immutable")]}
    )
    status: CheckpointStatus | None = None
