"""Where checkpoints live (pure), as the training-side SDK lays them out: one definition for the
pods that write and the controller that verifies (re-exported from trainerop_sdk.layout)."""

from trainerop_sdk.layout import (
    MOUNT,
    Claim,
    S3Bucket,
    StorageLocation,
    checkpoint_dir,
    checkpoint_name,
    checkpoint_path,
    copy_key,
    parse_bucket,
)

__all__ = [
    "MOUNT",
    "Claim",
    "S3Bucket",
    "StorageLocation",
    "checkpoint_dir",
    "checkpoint_name",
    "checkpoint_path",
    "copy_key",
    "parse_bucket",
]
