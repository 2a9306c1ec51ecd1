"""The checkpoint controller's decision core: pure, table-tested, no I/O.

It reports the latest committed Checkpoint of a Trainer (what a restarted pod resumes from)
and opens the gate. The quorum state machine and retention build on this.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainerop_common.api import Checkpoint
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.conditions import Desired

CONDITION = "CheckpointReady"
OWNED_FIELDS = ("checkpoint",)


@dataclass(frozen=True)
class Named:
    name: str
    checkpoint: Checkpoint


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]


def latest_committed(checkpoints: Sequence[Named], trainer: str) -> Named | None:
    committed = [
        c
        for c in checkpoints
        if c.checkpoint.spec.trainer == trainer and c.checkpoint.status and c.checkpoint.status.phase == "Committed"
    ]
    return max(committed, key=lambda c: (c.checkpoint.spec.epoch, c.checkpoint.spec.step, c.name), default=None)


def decide(trainer: str, spec: TrainerSpec, checkpoints: Sequence[Named]) -> Decision:
    if spec.checkpoint is None:
        return Decision(
            status={}, conditions=(Desired.true(CONDITION, "NoCheckpointing", "spec.checkpoint is not set"),)
        )
    latest = latest_committed(checkpoints, trainer)
    if latest is None:
        return Decision(
            status={"checkpoint": {}},
            conditions=(Desired.true(CONDITION, "NoCheckpointYet", "training starts from scratch"),),
        )
    c = latest.checkpoint.spec
    return Decision(
        status={"checkpoint": {"latest": latest.name, "resumeFrom": c.path}},
        conditions=(
            Desired.true(CONDITION, "Resumable", f"resumes from {latest.name} (epoch {c.epoch}, step {c.step})"),
        ),
    )
