"""What a fetched model must hash to, and what does not (pure but for reading the files).

The Hub lists each file's git blob id (``oid``) and, for a file stored in LFS, the sha256 of its
content (``lfs.oid``); the client checks only sizes after a download, so every file is checked
here: LFS files by the sha256 of their content, the others by their git blob id (sha1 of
``b"blob <size>\\0"`` and the content). An S3 source's files are checked against the sha256 its
manifest SHA256SUMS lists (:func:`parse_sums`)."""

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class Expected:
    path: str  # in the repository
    size: int
    sha256: str | None  # an LFS file's content hash
    blob_id: str  # git's id of the blob (of the LFS pointer, for an LFS file)

    def to_manifest(self) -> dict[str, object]:
        return (
            {"size": self.size, "sha256": self.sha256} if self.sha256 else {"size": self.size, "gitBlob": self.blob_id}
        )


def wanted(path: str, patterns: Sequence[str]) -> bool:
    """Whether a file matches the patterns (none: every file), as the Hub's client matches its
    ``allow_patterns``: shell globs, a pattern ending in "/" meaning everything under it."""
    return not patterns or any(fnmatch.fnmatch(path, p + "*" if p.endswith("/") else p) for p in patterns)


def expected_of(entries: Iterable[tuple[str, int, str, str | None]]) -> dict[str, Expected]:
    """From the tree listing's (path, size, oid, lfs sha256) of each file."""
    return {path: Expected(path, size, sha256, oid) for path, size, oid, sha256 in entries}


def digests(path: Path) -> tuple[int, str, str]:
    """The file's size, sha256 and git blob id, read once."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            sha256.update(chunk)
            blob.update(chunk)
    return size, sha256.hexdigest(), blob.hexdigest()


def problem(root: Path, want: Expected) -> str | None:
    """What is wrong with ``want.path`` under ``root``, or None."""
    path = root / want.path
    if not path.is_file():
        return f"{want.path}: missing after the download"
    size, sha256, blob = digests(path)
    if size != want.size:
        return f"{want.path}: {size} bytes where the source lists {want.size}"
    if want.sha256 is not None and sha256 != want.sha256:
        return f"{want.path}: sha256 {sha256} where the source lists {want.sha256}"
    if want.sha256 is None and blob != want.blob_id:
        return f"{want.path}: git blob id {blob} where the source lists {want.blob_id}"
    return None


def problems(root: Path, expected: Mapping[str, Expected]) -> list[str]:
    """Every file that is not what its source lists, by name."""
    return [p for want in sorted(expected.values(), key=lambda e: e.path) if (p := problem(root, want))]


SUMS_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
MAX_SUMS_FILES = 100_000


class ManifestError(ValueError):
    """A SHA256SUMS that cannot be trusted as written; the message names the line."""


def parse_sums(text: str, itself: str = "SHA256SUMS", reserved: str = "") -> dict[str, str]:
    """``sha256sum``'s output (``<hex>  <path>`` or ``<hex> *<path>`` per line) -> path -> sha256.
    A path that leaves the prefix (absolute, ``..``), has a control character, is listed twice,
    is a file and a directory at once, or is ``reserved`` (the cache's own manifest) refuses the
    manifest: no file is ever written outside the model's directory. A line naming the manifest
    ``itself`` is left out (``sha256sum *`` run where it already was)."""
    out: dict[str, str] = {}
    directories: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        found = SUMS_LINE.match(line)
        if found is None:
            raise ManifestError(f"line {number} is not '<sha256>  <path>': {line[:120]!r}")
        sha256, path = found.group(1).lower(), found.group(2)
        if path == itself:
            continue
        parents = {path.rsplit("/", depth)[0] for depth in range(1, path.count("/") + 1)}
        problem = path_problem(path, out, reserved) or (
            "is both a file and a directory in it" if path in directories or parents & out.keys() else None
        )
        if problem:
            raise ManifestError(f"line {number}: {path!r} {problem}")
        out[path] = sha256
        directories |= parents
        if len(out) > MAX_SUMS_FILES:
            raise ManifestError(f"more than {MAX_SUMS_FILES} files")
    if not out:
        raise ManifestError("it lists no file")
    return out


def path_problem(path: str, listed: Mapping[str, str], reserved: str) -> str | None:
    parts = path.split("/")  # as written: "a/./b" and "a//b" would name a/b under another key
    if any(p in ("", ".", "..") for p in parts) or "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "is not a path under the prefix"
    if path in listed:
        return "is listed twice"
    if path == reserved:
        return "is the name of the operator's own manifest in the cache: rename it"
    return None
