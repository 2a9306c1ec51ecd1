"""The ``Checkpoint`` kind: one checkpoint of a Trainer and its state machine.

Training pods report it (the spec: where it is and, shard by shard, the copies they wrote with
their sha256); the checkpoint controller verifies the copies in storage and moves it through
Pending -> Staging -> Committed -> GarbageCollected, or Failed (the status).
"""

from typing import Annotated, Literal

from pydantic import Field
from pydantic.config import JsonDict

from .base import Conditions, K8sModel, ObjectName, cel, list_map

CheckpointPhase = Literal["Pending", "Staging", "Committed", "GarbageCollected", "Failed"]
MAX_SHARDS = 1024
MAX_COPIES = 7
MAX_ID = 2147483647  # the largest user or group id a pod may run as (runAsUser, runAsGroup)


def immutable(name: str) -> JsonDict:
    return {"x-kubernetes-validations": [cel("self == oldSelf", f"{name} is immutable")]}


CopyKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        # Relative, and no segment may start with a dot: no ".." can leave the checkpoint's path.
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$",
    ),
]


class ShardReport(K8sModel):
    """One shard as its writer reported it: the copies (keys relative to spec.path) and their sha256."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {"x-kubernetes-validations": [cel("self == oldSelf", "a reported shard is immutable")]}
    }

    index: int = Field(ge=0, le=MAX_SHARDS - 1, description="The shard's number, below spec.shardCount.")
    sha256: str = Field(pattern=r"^[a-f0-9]{64}$", description="The shard's sha256 (hex), the same for every copy.")
    size: int = Field(ge=0, description="The shard's size in bytes.")
    copies: list[CopyKey] = Field(
        min_length=1,
        max_length=MAX_COPIES,
        description="Where each copy was written, relative to spec.path (at most replicationFactor).",
    )
    write_seconds: float | None = Field(default=None, ge=0, description="How long writing every copy took.")
    parts_sha256: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9+/]{43}=-[1-9][0-9]{0,4}$",
        description="Copies written as S3 multipart uploads: the checksum S3 keeps of such an upload (the sha256 "
        "of its parts' sha256s, base64, then '-' and the number of parts), which the controller compares instead "
        "of reading the copy.",
    )
    writer_uid: int | None = Field(
        default=None,
        ge=0,
        le=MAX_ID,
        description="Copies on a PersistentVolumeClaim: the user that wrote them; the collector pod deletes them as "
        "that user (never as root: data written as root is left on the claim).",
    )
    writer_gid: int | None = Field(default=None, ge=0, le=MAX_ID, description="That user's group.")


class UnreadableShard(K8sModel):
    """A shard a resuming pod found no readable copy of: the checkpoint is never resumed from again."""

    index: int = Field(ge=0, le=MAX_SHARDS - 1, description="The shard's number.")
    pod: ObjectName = Field(description="The pod that could not load it.")
    problem: str = Field(max_length=512, description="What each copy was, as the pod found it.")


class CheckpointSpec(K8sModel):
    """Reported by the training pods, each applying its own shard (server-side apply)."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "!has(self.shards) || self.shards.all(s, s.index < self.shardCount && "
                    "size(s.copies) <= self.replicationFactor)",
                    "a shard's index must be below shardCount and it can have at most replicationFactor copies",
                )
            ]
        }
    }

    trainer: ObjectName = Field(
        description="The Trainer this checkpoint belongs to.", json_schema_extra=immutable("trainer")
    )
    epoch: int = Field(ge=0, description="The training epoch it was taken at.", json_schema_extra=immutable("epoch"))
    step: int = Field(
        default=0, ge=0, description="The training step it was taken at.", json_schema_extra=immutable("step")
    )
    path: str = Field(
        min_length=1,
        max_length=1024,
        description="Where the checkpoint is stored.",
        json_schema_extra=immutable("path"),
    )
    shard_count: int = Field(
        default=1,
        ge=1,
        le=MAX_SHARDS,
        description="Shards the checkpoint is split into (one per writing replica).",
        json_schema_extra=immutable("shardCount"),
    )
    replication_factor: int = Field(
        default=1,
        ge=1,
        le=MAX_COPIES,
        description="Copies of each shard.",
        json_schema_extra=immutable("replicationFactor"),
    )
    shards: list[ShardReport] | None = Field(
        default=None,
        description="The shards written so far, one entry per index (each writer applies its own).",
        json_schema_extra=list_map(
            "index",
            MAX_SHARDS,
            **{"x-kubernetes-validations": [cel("size(self) >= size(oldSelf)", "reported shards cannot be removed")]},
        ),
    )
    unreadable: list[UnreadableShard] | None = Field(
        default=None,
        description="Shards a resuming pod could not load (each pod applies its own entry).",
        json_schema_extra=list_map("index", MAX_SHARDS),
    )


class CheckpointStatus(K8sModel):
    """Written by the checkpoint controller."""

    phase: CheckpointPhase | None = Field(
        default=None, description="Pending, Staging, Committed, GarbageCollected or Failed."
    )
    committed_replicas: int = Field(
        default=0, ge=0, description="Verified copies of the weakest shard (a majority commits)."
    )
    verified_shards: int = Field(default=0, ge=0, description="Shards with a majority of verified copies.")
    reason: str | None = Field(default=None, description="CamelCase reason of the phase.")
    message: str | None = Field(default=None, max_length=4096, description="What is missing, wrong or done.")
    commit_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When it was committed."
    )
    collect_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When it was garbage-collected (its data deleted).",
    )
    conditions: Conditions | None = None


class Checkpoint(K8sModel):
    """One checkpoint of a Trainer: where its shards are, and whether they are committed (docs/checkpoints.md)."""

    spec: CheckpointSpec
    status: CheckpointStatus | None = None
