"""Checkpoint storage (a directory on the checkpoint PVC, or an S3 prefix), shared by the training
pods (which write) and the checkpoint controller (which verifies and garbage-collects); where
things go is in :mod:`trainerop_sdk.layout`. Standard library only (boto3, when installed, for
multipart uploads: :mod:`trainerop_sdk.s3_multipart`)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from . import s3_multipart
from .checksums import Digest, StoredChecksum
from .layout import MOUNT, S3_SCHEME, parse_s3_uri
from .s3 import CHUNK, SINGLE_PUT_LIMIT, Credentials, S3Client


class Location(Protocol):
    """The objects of one checkpoint, addressed by keys relative to its path."""

    def put(self, key: str, data: bytes) -> None: ...

    def put_file(self, key: str, path: str, sha256: str, size: int) -> None:
        """Write the file at ``path`` (its ``sha256`` and ``size`` known), streamed."""
        ...

    def get(self, key: str) -> bytes | None: ...

    def sha256(self, key: str) -> Digest | None:
        """The copy's sha256 and size, its data read (None: it does not exist)."""
        ...

    def stored_checksum(self, key: str) -> StoredChecksum | None:
        """The copy's size and the checksum its storage kept, without reading it (None: it does
        not exist)."""
        ...

    def delete_all(self) -> int: ...


class LocalLocation:
    """A directory (the checkpoint PVC as mounted in a pod)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def put(self, key: str, data: bytes) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        with partial.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        partial.replace(target)  # a reader never sees half a copy

    def put_file(self, key: str, path: str, sha256: str, size: int) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        with open(path, "rb") as source, partial.open("wb") as f:
            shutil.copyfileobj(source, f, CHUNK)
            f.flush()
            os.fsync(f.fileno())
        partial.replace(target)

    def get(self, key: str) -> bytes | None:
        target = self.root / key
        return target.read_bytes() if target.is_file() else None

    def stored_checksum(self, key: str) -> StoredChecksum | None:
        """A file keeps no checksum: its size only."""
        target = self.root / key
        return StoredChecksum(target.stat().st_size) if target.is_file() else None

    def sha256(self, key: str) -> Digest | None:
        target = self.root / key
        if not target.is_file():
            return None
        digest, size = hashlib.sha256(), 0
        with target.open("rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return Digest(digest.hexdigest(), size)

    def delete_all(self) -> int:
        if not self.root.exists():
            return 0
        count = sum(1 for p in self.root.rglob("*") if p.is_file())
        shutil.rmtree(self.root)
        return count


class S3Location:
    """A prefix in an S3 bucket."""

    def __init__(self, uri: str, creds: Credentials) -> None:
        location = parse_s3_uri(uri)
        self.creds, self.bucket = creds, location.bucket
        self.client = S3Client(creds, location.bucket)
        self.prefix = location.prefix + "/" if location.prefix else ""

    def put(self, key: str, data: bytes) -> None:
        self.client.put(self.prefix + key, data)

    def put_file(self, key: str, path: str, sha256: str, size: int) -> None:
        """Multipart with boto3 when installed (any size); else one streamed PUT (up to 5 GiB)."""
        if s3_multipart.available():
            s3_multipart.upload_file(self.creds, self.bucket, self.prefix + key, path)
        elif size > SINGLE_PUT_LIMIT:
            raise ValueError(
                f"a shard of {size} bytes is larger than one S3 PUT takes (5 GiB): install trainerop-sdk[s3] "
                "(boto3) in the training image for multipart uploads"
            )
        else:
            self.client.put_file(self.prefix + key, path, sha256, size)

    def get(self, key: str) -> bytes | None:
        return self.client.get(self.prefix + key)

    def stored_checksum(self, key: str) -> StoredChecksum | None:
        return self.client.stored_checksum(self.prefix + key)

    def sha256(self, key: str) -> Digest | None:
        return self.client.sha256(self.prefix + key)

    def delete_all(self) -> int:
        return self.client.delete_prefix(self.prefix) if self.prefix else 0


def open_location(path: str, env: Mapping[str, str] | None = None, local_root: str | None = None) -> Location:
    """The checkpoint at ``path``: an s3:// URI (credentials from ``env``, the AWS_* variables) or a
    path under /checkpoints (``local_root`` replaces /checkpoints, for tools that see the PVC elsewhere)."""
    if path.startswith(S3_SCHEME):
        return S3Location(path, Credentials.from_env(env))
    if local_root is not None and path.startswith(MOUNT):
        path = local_root.rstrip("/") + path[len(MOUNT) :]
    return LocalLocation(path)
