"""The shared cache's mechanics, whatever the source (I/O): one fetch at a time per model (an
flock), links swapped atomically, checked revisions no other user of the claim can change.

Layout (a volume the namespace's runs share)::

    <cache>/hf/<org>/<name>/<commit>[-<patterns>]/          a Hub revision's files, and MANIFEST
    <cache>/hf/<org>/<name>/<revision>[-<patterns>] -> …    a branch or tag: a link to its commit
    <cache>/s3/<bucket>/<prefix>/@<sha256>[-<patterns>]/    the files an S3 manifest of that hash lists
    <cache>/s3/<bucket>/<prefix>/@latest[-<patterns>] -> …  an S3 source not pinned: the last fetched
    <…>/.lock                                               held while one fetch looks or writes

A directory with a manifest is whole and checked: downloads go to a ``.partial-…`` directory of
their own and are renamed into place once every file is checked, read-only for everyone. The
directories that hold revisions and links are sticky: a user of the group can add its own, and
can neither rename nor remove another user's. A revision found with anything writable, a link
inside, or a file of another owner was changed since it was checked: its owner fetches it again,
another user refuses it (``CacheTampered``). No link the initializer did not make is followed.
"""

import contextlib
import errno
import fcntl
import glob
import json
import os
import secrets
import shutil
import stat
import tempfile
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
    note: str = ""  # what the run should know beyond that (a link it could not move)


def cache_not_writable(err: PermissionError) -> FetchError:
    """The claim's directories, made by another user or read-only."""
    return FetchError(
        "CacheNotWritable",
        f"cannot write the model cache: {err.strerror}: {err.filename} (the claim must be writable by the pods' "
        "user: give its volume that user's group, e.g. a fsGroup in the pods' securityContext)",
    )


def tampered(path: Path, why: str, owner: int) -> FetchError:
    """What the initializer never leaves in the cache, and this pod's user cannot replace."""
    return FetchError(
        "CacheTampered",
        f"refused: {path} {why} (uid {owner}'s; this pod runs as uid {os.geteuid()}): the initializer leaves a "
        "checked revision read-only, without links, in real directories, so it was changed or made by hand; its "
        "owner or an administrator must remove it, or the run must use another cacheClaim",
    )


# What the cache's directories are made: readable by every user (the training container may run as
# another), writable by the group (runs of other users sharing the claim through a fsGroup), sticky
# (a user of the group removes or renames only what it made). A checked revision: read-only.
SHARED_DIRECTORY = 0o1775
CHECKED_FILE, CHECKED_DIRECTORY = 0o444, 0o555
WRITABLE = 0o222
LOCK_FILE = 0o444  # a flock needs only a descriptor open for reading


@contextlib.contextmanager
def exclusive(lock: Path, say: Say) -> Iterator[None]:
    """Hold ``lock`` (an flock: released by the kernel if the holder dies). Opened for reading,
    which is all an flock needs: a pod of another user sharing the cache may take it too. Never
    through a link, never anything but a plain file (a pipe would block the open)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, LOCK_FILE)
    except OSError as err:
        if err.errno != errno.ELOOP:  # a link
            raise
        raise tampered(lock, "is a link", lock.lstat().st_uid) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise tampered(lock, "is not a plain file", os.fstat(fd).st_uid)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another pod is fetching this model: waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def shared_directories(cache: Path, leaf: Path, say: Say) -> None:
    """``leaf`` and the directories between it and ``cache``: those missing made shared, each a
    real directory (a link there would lead the fetch out of the cache: refused) and sticky when
    its group may write it (made so when it is this user's; said when it is not)."""
    parts = leaf.relative_to(cache).parts
    cache.mkdir(parents=True, exist_ok=True)  # the volume's mount: there already, in a pod
    guarded(cache, say)
    for depth in range(1, len(parts) + 1):
        path = cache.joinpath(*parts[:depth])
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            path.chmod(SHARED_DIRECTORY)
        guarded(path, say)


def guarded(directory: Path, say: Say) -> None:
    st = directory.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise tampered(directory, "is a link or a file where the cache has a directory", st.st_uid)
    if st.st_mode & 0o022 == 0 or st.st_mode & stat.S_ISVTX:
        return
    if st.st_uid == os.geteuid():
        directory.chmod(stat.S_IMODE(st.st_mode) | stat.S_ISVTX)  # made by an earlier release
        return
    say(
        f"warning: {directory} (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}) is writable by other users and "
        "not sticky: they can rename what it holds away; its owner should make it sticky (chmod +t)"
    )


def link(at: Path, target: str) -> bool:
    """Point ``at`` at its sibling ``target``, atomically (a reader sees the old or the new);
    False when ``at`` is another user's, which this one cannot replace (a sticky directory)."""
    if at.name == target:
        return True
    with contextlib.suppress(OSError):
        if os.readlink(at) == target:
            return True
    temporary = at.with_name(f".link-{secrets.token_hex(8)}")  # a name no other pod can take first
    temporary.symlink_to(target)
    try:
        os.replace(temporary, at)
    except (PermissionError, IsADirectoryError):
        temporary.unlink()
        return False
    return True


def placed(where: Path, final: Path, say: Say) -> tuple[Path, str]:
    """``where`` linked to ``final``: the path the run reads and what it should know. A link of
    another user that cannot be moved is left as it is and the revision's own directory named."""
    if link(where, final.name):
        return where, ""
    st = where.lstat()
    names = os.readlink(where) if stat.S_ISLNK(st.st_mode) else "a directory"
    note = (
        f"{where.name} is uid {st.st_uid}'s and names {names}: this user cannot move it; the checked revision is "
        f"{final}"
    )
    say(f"warning: {note}")
    return final, note


def found(final: Path, say: Say) -> int | None:
    """How many files ``final`` holds when it is in the cache as checked; None when it is not (or
    was this user's and not as checked: then removed, to be fetched again). Another user's
    revision that is not as checked is refused: this user cannot replace it."""
    try:
        owner = final.lstat().st_uid
    except FileNotFoundError:
        return None
    why = not_checked(final)
    if why is None:
        return len(listed(final))
    if owner != os.geteuid():
        raise tampered(final, why, owner)
    say(f"{final} {why}: not as it was checked; fetching it again")
    remove(final)
    return None


def listed(final: Path) -> dict[str, object]:
    """The files ``final``'s manifest lists (path -> what was checked)."""
    manifest = json.loads((final / MANIFEST).read_text())
    files = manifest.get("files") if isinstance(manifest, dict) else None
    return files if isinstance(files, dict) else {}


def not_checked(final: Path) -> str | None:
    """Why ``final`` is not a revision as the initializer leaves one once checked: a directory of
    one owner, nothing in it writable, no link, exactly the files its manifest lists."""
    top = final.lstat()
    if not stat.S_ISDIR(top.st_mode):
        return "is a link or a file, not a revision's directory"
    try:
        everything = walked(final)
    except OSError as err:
        return f"cannot be read whole ({err.strerror}: {err.filename})"
    present = set()
    for path in everything:
        st = path.lstat()
        name = path.relative_to(final).as_posix()
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return f"holds {name}, which is a link or not a plain file"
        if st.st_mode & WRITABLE:
            return f"has {name} writable (mode {stat.S_IMODE(st.st_mode):o})"
        if st.st_uid != top.st_uid:
            return f"has {name} of uid {st.st_uid} in a revision of uid {top.st_uid}"
        if stat.S_ISREG(st.st_mode) and name != MANIFEST:
            present.add(name)
    if not (final / MANIFEST).is_file():
        return "has no manifest"
    try:
        wanted = set(listed(final))
    except (OSError, ValueError):  # UnicodeDecodeError and JSON's errors are ValueErrors
        return "has a manifest that cannot be read"
    return None if wanted == present else "does not hold exactly the files its manifest lists"


def walked(root: Path) -> list[Path]:
    """``root`` and everything under it, following no link."""
    out = [root]
    for directory, directories, files in os.walk(root, onerror=raised):
        out += [Path(directory, name) for name in [*directories, *files]]
    return out


def raised(err: OSError) -> None:
    raise err


def remove(path: Path) -> None:
    """This user's ``path``, a revision made read-only too (its directories made writable first)."""
    if not stat.S_ISDIR(path.lstat().st_mode):
        path.unlink()
        return
    for directory, _, _ in os.walk(path, onerror=raised):  # top-down, following no link
        os.chmod(directory, 0o700)
    shutil.rmtree(path)


@contextlib.contextmanager
def partial_directory(final: Path) -> Iterator[Path]:
    """Where ``final``'s download goes until it is checked: a new directory only this user can
    write, whose name no other pod could take first; removed if anything fails (nothing of a
    refused download is kept). What a fetch of this user that died left is removed first."""
    prefix = f".partial-{final.name}-"
    for leftover in final.parent.glob(f"{glob.escape(prefix)}*"):
        if leftover.lstat().st_uid == os.geteuid():  # the lock is held: no fetch of it is running
            remove(leftover)
    partial = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    try:
        yield partial
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # renamed into place before what failed
            remove(partial)
        raise


def seal(root: Path) -> None:
    """Everything under ``root`` read-only for everyone, its owner too (who alone could undo it)."""
    for path in walked(root):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            raise FetchError("CacheTampered", f"refused: the download has a link, {path}; nothing was kept")
        path.chmod(CHECKED_DIRECTORY if stat.S_ISDIR(st.st_mode) else CHECKED_FILE)


def into_place(partial: Path, final: Path, where: Path, manifest: str, say: Say) -> tuple[Path, str]:
    """The checked download with its manifest renamed into place, read-only, ``where`` linked to
    it: a directory with a manifest is always whole. The path the run reads, and a note."""
    (partial / MANIFEST).write_text(manifest)
    seal(partial)
    partial.rename(final)  # found() removed what was there, or refused it
    return placed(where, final, say)
