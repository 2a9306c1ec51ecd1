"""Checkpoint storage (a directory on the checkpoint PVC, or an S3 prefix), shared by the training
pods (which write) and the checkpoint controller (which verifies and garbage-collects); where
things go is in :mod:`trainerop_sdk.layout`. Standard library only."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from .layout import MOUNT, S3_SCHEME, parse_s3_uri
from .s3 import CHUNK, Credentials, S3Client


class Location(Protocol):
    """The objects of one checkpoint, addressed by keys relative to its path."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def sha256(self, key: str) -> tuple[str, int] | None: ...

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

    def get(self, key: str) -> bytes | None:
        target = self.root / key
        return target.read_bytes() if target.is_file() else None

    def sha256(self, key: str) -> tuple[str, int] | None:
        target = self.root / key
        if not target.is_file():
            return None
        digest, size = hashlib.sha256(), 0
        with target.open("rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return digest.hexdigest(), size

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
        self.client = S3Client(creds, location.bucket)
        self.prefix = location.prefix + "/" if location.prefix else ""

    def put(self, key: str, data: bytes) -> None:
        self.client.put(self.prefix + key, data)

    def get(self, key: str) -> bytes | None:
        return self.client.get(self.prefix + key)

    def sha256(self, key: str) -> tuple[str, int] | None:
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
