"""The checkpoint controller's own flags (docs/controllers.md)."""

from dataclasses import dataclass

from trainerop_common.config import flag


@dataclass(frozen=True)
class CheckpointConfig:
    storage_pod_image: str = flag(
        "trainer-operator:dev",
        "image of the pods that verify and delete checkpoints on a PersistentVolumeClaim "
        "(python -m trainerop_checkpoint.pvc_worker): the operator's image, as the storage-pod admission policy "
        "allows",
    )
    save_deadline_seconds: float = flag(
        300.0,
        "how long a save a user asks for (kubectl trainer checkpoint) may take to commit before it is reported "
        "missed; a move the quota controller holds has its policy's checkpointGraceSeconds instead",
    )
    save_margin_steps: int = flag(
        10,
        "the fewest steps ahead of the furthest rank a save is asked at (ranks that have not measured the steps "
        "between their heartbeats yet); otherwise two heartbeats' worth of steps",
    )

    def problems(self) -> list[str]:
        out = []
        if self.save_deadline_seconds <= 0:
            out.append("--save-deadline-seconds must be more than 0")
        if self.save_margin_steps < 1:
            out.append("--save-margin-steps must be 1 or more")
        return out
