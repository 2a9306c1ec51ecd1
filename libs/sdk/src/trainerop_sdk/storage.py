"""Checkpoint storage (a directory on the checkpoint PVC, or an S3 prefix), shared by the training
pods (which write) and the checkpoint controller (which verifies and garbage-collects); where
things go is in :mod:`trainerop_sdk.layout`. Standard library only (boto3, when installed, for
multipart uploads: :mod:`trainerop_sdk.s3_multipart`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, Protocol

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


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Non-blocking: a FIFO planted as a copy is opened without waiting for a writer, then refused.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _segments(text: str) -> list[str]:
    """The names of a relative path, none of which may climb out or stand for the directory itself."""
    names = text.strip("/").split("/")
    if any(name in ("", ".", "..") for name in names):
        raise ValueError(f"{text!r} is not a plain relative path")
    return names


class NoFollowLocation:
    """A checkpoint directory on a claim that tenants share, as the checkpoint controller's pods
    read and delete it: every name below ``base`` (the trusted mount) is opened relative to its
    parent's descriptor without following a symlink, so a symlink planted anywhere (as the
    Trainer's directory, as the checkpoint, inside it) is an error, never a way elsewhere. A copy
    that is not a regular file is unreadable. Read and delete only: the training pods write with
    :class:`LocalLocation`."""

    def __init__(self, base: str, path: str) -> None:
        base = base.rstrip("/")
        if not path.startswith(base + "/"):
            raise ValueError(f"{path!r} is not under {base}")
        self.base, self.names = base, _segments(path[len(base) :])

    @contextlib.contextmanager
    def _directory(self, names: list[str]) -> Iterator[int | None]:
        """A descriptor of the directory ``names`` below base (None: a name does not exist); a
        symlink or anything but a directory on the way raises OSError."""
        fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in names:
                try:
                    inner = os.open(name, _DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    yield None
                    return
                os.close(fd)
                fd = inner
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _file(self, key: str) -> Iterator[BinaryIO | None]:
        """The copy at ``key``, open for reading (None: it does not exist)."""
        *folders, name = _segments(key)
        with self._directory(self.names + folders) as parent:
            if parent is None:
                yield None
                return
            try:
                fd = os.open(name, _FILE, dir_fd=parent)
            except FileNotFoundError:
                yield None
                return
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(errno.EINVAL, f"{key} is not a regular file")
                os.set_blocking(fd, True)
                yield f

    def get(self, key: str) -> bytes | None:
        with self._file(key) as f:
            return None if f is None else f.read()

    def stored_checksum(self, key: str) -> StoredChecksum | None:
        """A file keeps no checksum: its size only."""
        with self._file(key) as f:
            return None if f is None else StoredChecksum(os.fstat(f.fileno()).st_size)

    def sha256(self, key: str) -> Digest | None:
        with self._file(key) as f:
            if f is None:
                return None
            digest, size = hashlib.sha256(), 0
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
            return Digest(digest.hexdigest(), size)

    def delete_all(self) -> int:
        """Delete the directory and what is in it (0: it was gone); shutil.rmtree by descriptor
        unlinks a symlink inside instead of following it, and refuses one as the directory."""
        *folders, name = self.names
        with self._directory(folders) as parent:
            if parent is None:
                return 0
            try:
                top = os.open(name, _DIRECTORY, dir_fd=parent)
            except FileNotFoundError:
                return 0
            try:
                count = sum(len(files) for _, _, files, _ in os.fwalk(".", dir_fd=top))
            finally:
                os.close(top)
            shutil.rmtree(name, dir_fd=parent)
            return count

    def put(self, key: str, data: bytes) -> None:
        raise io.UnsupportedOperation("a NoFollowLocation is read and deleted, never written")

    def put_file(self, key: str, path: str, sha256: str, size: int) -> None:
        raise io.UnsupportedOperation("a NoFollowLocation is read and deleted, never written")


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


def open_location(
    path: str, env: Mapping[str, str] | None = None, local_root: str | None = None, follow_symlinks: bool = True
) -> Location:
    """The checkpoint at ``path``: an s3:// URI (credentials from ``env``, the AWS_* variables) or a
    path under /checkpoints (``local_root`` replaces /checkpoints, for tools that see the PVC elsewhere).
    Without ``follow_symlinks`` a path on the claim is reached and read only through real
    directories (:class:`NoFollowLocation`: the checkpoint controller's pods on a shared claim)."""
    if path.startswith(S3_SCHEME):
        return S3Location(path, Credentials.from_env(env))
    root = MOUNT if local_root is None else local_root.rstrip("/")
    if path.startswith(MOUNT):
        path = root + path[len(MOUNT) :]
    return LocalLocation(path) if follow_symlinks else NoFollowLocation(root, path)
