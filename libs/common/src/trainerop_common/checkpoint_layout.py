"""Where checkpoints live (pure), as the training-side SDK lays them out: one definition for the
pods that write and the controller that verifies (re-exported from trainerop_sdk.layout)."""

from trainerop_sdk.layout import MOUNT, checkpoint_dir, checkpoint_name, checkpoint_path, copy_key

__all__ = ["MOUNT", "checkpoint_dir", "checkpoint_name", "checkpoint_path", "copy_key"]
