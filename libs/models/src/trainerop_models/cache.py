"""The shared cache's mechanics, whatever the source (I/O): one fetch at a time per model (an
flock), links swapped atomically, files and directories every user of the claim may read.

Layout (a volume the namespace's runs share)::

    <cache>/hf/<org>/<name>/<commit>[-<patterns>]/          a Hub revision's files, and MANIFEST
    <cache>/hf/<org>/<name>/<revision>[-<patterns>] -> …    a branch or tag: a link to its commit
    <cache>/s3/<bucket>/<prefix>/@<sha256>[-<patterns>]/    the files an S3 manifest of that hash lists
    <cache>/s3/<bucket>/<prefix>/@latest[-<patterns>] -> …  an S3 source not pinned: the last fetched
    <…>/.lock                                               held while one fetch looks or writes

A directory with a manifest is always whole and checked: downloads go to ``.partial-…`` and are
renamed into place once every file is checked.
"""

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "trainer-operator-model.json"
Say = Callable[[str], None]


class FetchError(Exception):
    """The model could not be fetched, or was refused; the message says which and what to do,
    ``reason`` in a word (the Trainer's ModelVerified condition's reason)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Fetched:
    path: Path  # the revision's directory, as a pod reads it (a link for a branch or tag)
    commit: str  # the Hub commit, or the sha256 of an S3 source's manifest
    files: int
    downloaded: bool


def cache_not_writable(err: PermissionError) -> FetchError:
    """The claim's directories, made by another user or read-only."""
    return FetchError(
        "CacheNotWritable",
        f"cannot write the model cache: {err.strerror}: {err.filename} (the claim must be writable by the pods' "
        "user: give its volume that user's group, e.g. a fsGroup in the pods' securityContext)",
    )


@contextlib.contextmanager
def exclusive(lock: Path, say: Say) -> Iterator[None]:
    """Hold ``lock`` (an flock: released by the kernel if the holder dies). Opened for reading,
    which is all an flock needs: a pod of another user sharing the cache may take it too."""
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, SHARED_FILE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another pod is fetching this model: waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def link(at: Path, target: str) -> None:
    """Point ``at`` at its sibling ``target``, atomically (a reader sees the old or the new)."""
    if at.name == target:
        return
    temporary = at.with_name(f".link-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, at)


# What the cache's files and directories are made: readable by every user (the training container
# may run as another), writable by the group (runs of other users sharing the claim through a
# fsGroup). The client may write its downloads 0600.
SHARED_FILE, SHARED_DIRECTORY = 0o664, 0o775


def shared_directories(cache: Path, leaf: Path) -> None:
    """``leaf`` and the directories between it and ``cache``, those made now made shared."""
    parts = leaf.relative_to(cache).parts
    cache.mkdir(parents=True, exist_ok=True)  # the volume's mount: there already, in a pod
    for depth in range(1, len(parts) + 1):
        path = cache.joinpath(*parts[:depth])
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            path.chmod(SHARED_DIRECTORY)


def shared(root: Path) -> None:
    root.chmod(SHARED_DIRECTORY)
    for path in root.rglob("*"):
        path.chmod(SHARED_DIRECTORY if path.is_dir() and not path.is_symlink() else SHARED_FILE)


def cached(where: Path, final: Path) -> int | None:
    """How many files ``final`` holds when it is whole (its manifest is written: it was checked),
    with ``where`` linked to it; None: it is not in the cache."""
    if not (final / MANIFEST).is_file():
        return None
    link(where, final.name)
    return len(json.loads((final / MANIFEST).read_text()).get("files") or {})


@contextlib.contextmanager
def partial_directory(final: Path) -> Iterator[Path]:
    """Where ``final``'s download goes until it is checked: emptied first (a fetch that died
    there), removed if anything fails (nothing of a refused download is kept)."""
    partial = final.with_name(f".partial-{final.name}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def into_place(partial: Path, final: Path, where: Path, manifest: str) -> None:
    """The checked download with its manifest renamed into place, ``where`` linked to it: a
    directory with a manifest is always whole."""
    (partial / MANIFEST).write_text(manifest)
    shared(partial)
    shutil.rmtree(final, ignore_errors=True)  # a directory without a manifest is not whole
    partial.rename(final)
    link(where, final.name)
