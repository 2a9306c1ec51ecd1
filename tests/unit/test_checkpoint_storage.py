"""Checkpoint layout and the PVC (directory) storage on a real filesystem."""

import hashlib
from pathlib import Path

import pytest

from trainerop_sdk.checkpoint import default_shard
from trainerop_sdk.checksums import Digest
from trainerop_sdk.layout import (
    Claim,
    S3Bucket,
    StorageLocation,
    checkpoint_dir,
    checkpoint_name,
    checkpoint_path,
    copy_key,
    parse_bucket,
)
from trainerop_sdk.storage import LocalLocation, open_location


@pytest.mark.parametrize(
    ("bucket", "location", "directory"),
    [
        ("pvc-backups", Claim("pvc-backups"), "/checkpoints/llama"),
        ("s3://ckpt/runs/", S3Bucket("ckpt", "runs"), "s3://ckpt/runs/team-a/llama"),
        ("s3://ckpt/team-a/runs", S3Bucket("ckpt", "team-a/runs"), "s3://ckpt/team-a/runs/team-a/llama"),
        ("s3://ckpt", S3Bucket("ckpt", ""), "s3://ckpt/team-a/llama"),
        ("s3://ckpt/v1.2/_x", S3Bucket("ckpt", "v1.2/_x"), "s3://ckpt/v1.2/_x/team-a/llama"),
    ],
)
def test_a_bucket_is_parsed_once_into_a_location(bucket: str, location: StorageLocation, directory: str) -> None:
    assert parse_bucket(bucket) == location
    assert checkpoint_dir(location, "team-a", "llama") == directory


# A segment that climbs out of the prefix ("..", "."), or "#" and "?" that would cut the prefix short
# (every Trainer's data under one prefix): refused, here and by the CRD's rule (test_models).
@pytest.mark.parametrize(
    "bucket",
    [
        "s3://bkt/../other",
        "s3://bkt/runs/..",
        "s3://bkt/./runs",
        "s3://bkt/.hidden",
        "s3:///x",
        "s3://bkt/team#a",
        "s3://bkt/a?b",
        "s3://bkt//a",
        "gs://bkt/p",
        "/checkpoints",
        "Pvc",
        "pvc..backups",
    ],
)
def test_a_bucket_that_could_leave_its_prefix_is_refused(bucket: str) -> None:
    with pytest.raises(ValueError, match="is n"):
        parse_bucket(bucket)


def test_layout() -> None:
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


def test_a_directory_location_writes_a_copy_from_a_file_streamed(tmp_path: Path) -> None:
    source = tmp_path / "shard.bin"
    source.write_bytes(b"w" * (3 << 20))
    location = open_location("/checkpoints/llama/step-0000000002", local_root=str(tmp_path / "pvc"))
    location.put_file(copy_key(0, 0), str(source), "unused here", 3 << 20)
    assert location.sha256(copy_key(0, 0)) == Digest(hashlib.sha256(source.read_bytes()).hexdigest(), 3 << 20)
    assert not list((tmp_path / "pvc").rglob("*.partial"))


def test_a_shard_too_large_for_one_put_needs_the_multipart_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainerop_sdk import s3_multipart, storage
    from trainerop_sdk.s3 import Credentials

    monkeypatch.setattr(s3_multipart, "available", lambda: False)
    creds = Credentials("id", "secret", "http://127.0.0.1:9")
    location = storage.S3Location("s3://bucket/prefix", creds)
    with pytest.raises(ValueError, match=r"install trainerop-sdk\[s3\]"):
        location.put_file("shard-00000/copy-0", "/nonexistent", "0" * 64, 6 * 1024**3)
