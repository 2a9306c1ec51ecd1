"""Checkpoint layout and the PVC (directory) storage on a real filesystem."""

from pathlib import Path

import pytest

from trainerop_sdk.checkpoint import default_shard
from trainerop_sdk.layout import checkpoint_dir, checkpoint_name, checkpoint_path, copy_key
from trainerop_sdk.storage import LocalLocation, open_location


def test_layout() -> None:
    assert checkpoint_dir("pvc-backups", "team-a", "llama") == "/checkpoints/llama"
    assert checkpoint_dir("s3://ckpt/runs/", "team-a", "llama") == "s3://ckpt/runs/team-a/llama"
    assert checkpoint_path("/checkpoints/llama", 1200) == "/checkpoints/llama/step-0000001200"
    assert checkpoint_name("llama", 1200) == "llama-step-1200"
    assert copy_key(3, 1) == "shard-00003/copy-1"


def test_a_directory_location_writes_whole_copies_and_hashes_them(tmp_path: Path) -> None:
    location = open_location("/checkpoints/llama/step-0000000001", local_root=str(tmp_path))
    assert isinstance(location, LocalLocation)
    location.put(copy_key(0, 0), b"weights")
    assert location.get(copy_key(0, 0)) == b"weights"
    sha = location.sha256(copy_key(0, 0))
    assert sha is not None
    assert sha[1] == 7
    assert location.sha256(copy_key(0, 1)) is None
    assert not list(tmp_path.rglob("*.partial"))
    assert location.delete_all() == 1
    assert not (tmp_path / "llama" / "step-0000000001").exists()


@pytest.mark.parametrize(
    ("env", "shard"),
    [
        ({"GROUP_RANK": "1", "RANK": "9", "LOCAL_RANK": "1"}, 1),  # torchrun: the node's rank, not the process's
        ({"RANK": "3", "REPLICA_INDEX": "2"}, 3),
        ({"PROCESS_ID": "5"}, 5),
        ({"REPLICA_INDEX": "1"}, 1),
        ({}, 0),
    ],
)
def test_a_replica_writes_the_shard_of_its_rank(env: dict[str, str], shard: int) -> None:
    assert default_shard(env) == shard
