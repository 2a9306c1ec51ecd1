"""Where checkpoints live (pure: no I/O), shared by the training pods and the checkpoint controller.

    <CHECKPOINT_DIR>/step-0000001200/shard-00003/copy-1

CHECKPOINT_DIR is ``/checkpoints/<trainer>`` on a PersistentVolumeClaim mounted at /checkpoints,
or ``s3://<bucket>/<prefix>/<namespace>/<trainer>``.
"""

MOUNT = "/checkpoints"


def checkpoint_dir(bucket: str, namespace: str, trainer: str) -> str:
    """The Trainer's own directory in its checkpoint storage."""
    if bucket.startswith("s3://"):
        return f"{bucket.rstrip('/')}/{namespace}/{trainer}"
    return f"{MOUNT}/{trainer}"


def checkpoint_path(directory: str, step: int) -> str:
    return f"{directory.rstrip('/')}/step-{step:010d}"


def checkpoint_name(trainer: str, step: int) -> str:
    """The Checkpoint object of a step (one per step: every shard writer reports into it)."""
    return f"{trainer}-step-{step}"


def copy_key(shard: int, copy: int) -> str:
    """A shard copy's key, relative to the checkpoint's path."""
    return f"shard-{shard:05d}/copy-{copy}"
