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
