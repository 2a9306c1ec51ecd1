"""Where a model comes from, and where a pod finds it (pure): ``hf://org/name@revision``, a model
repository of the Hugging Face Hub at a branch, tag or commit; or ``s3://bucket/prefix``, the files
a manifest ``SHA256SUMS`` under that prefix lists, optionally pinned by the manifest's own sha256
(``s3://bucket/prefix@sha256:<hex>``). The Trainer's schema, the trainer controller
(``MODEL_PATH``) and the model initializer all read a source by these rules."""

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

HF_SCHEME = "hf://"
S3_SCHEME = "s3://"
# The Hub's repository names: letters, digits, "-", "_" and "."; no "--" or ".."; at most 96 characters.
NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
COMMIT = re.compile(r"[0-9a-f]{40}")
REVISION = r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}"
# S3: a bucket's name (3 to 63 lowercase letters, digits, '.' and '-'), a prefix of path
# components, and optionally the sha256 of the prefix's manifest.
BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
PREFIX = r"[A-Za-z0-9][A-Za-z0-9._=+-]*(?:/[A-Za-z0-9][A-Za-z0-9._=+-]*){0,31}"
PIN = r"sha256:[0-9a-f]{64}"
# The whole source as one expression (the schema's pattern); parse() says precisely what is wrong.
SOURCE_PATTERN = f"^(hf://{NAME}/{NAME}@{REVISION}|s3://{BUCKET}/{PREFIX}(@{PIN})?)$"
EXAMPLE = "hf://<org>/<name>@<revision>"
S3_EXAMPLE = "s3://<bucket>/<prefix>[@sha256:<hex of its SHA256SUMS>]"
SUMS = "SHA256SUMS"  # the manifest under an S3 source's prefix: "<sha256>  <path>" per file (sha256sum's)


class SourceError(ValueError):
    """The source cannot be read; the message says what is expected."""


@dataclass(frozen=True)
class HubSource:
    repo_id: str  # org/name
    revision: str  # a branch, a tag or a commit

    @property
    def pinned(self) -> bool:
        """Whether the revision is a commit (nothing to resolve, nothing that can move)."""
        return bool(COMMIT.fullmatch(self.revision))

    def __str__(self) -> str:
        return f"{HF_SCHEME}{self.repo_id}@{self.revision}"


@dataclass(frozen=True)
class S3Source:
    bucket: str
    prefix: str  # without a trailing "/"
    manifest_sha256: str | None  # the pin: what SHA256SUMS must hash to (None: as it is when fetched)

    @property
    def pinned(self) -> bool:
        return self.manifest_sha256 is not None

    @property
    def manifest_key(self) -> str:
        return f"{self.prefix}/{SUMS}"

    def __str__(self) -> str:
        pin = f"@sha256:{self.manifest_sha256}" if self.manifest_sha256 else ""
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}{pin}"


Source = HubSource | S3Source


def _name_ok(name: str) -> bool:
    return bool(re.fullmatch(NAME, name)) and "--" not in name and ".." not in name


def parse(uri: str) -> Source:
    """``hf://org/name@revision`` or ``s3://bucket/prefix[@sha256:<hex>]``; raises SourceError
    naming what is wrong."""
    if uri.startswith(S3_SCHEME):
        return parse_s3(uri)
    if not uri.startswith(HF_SCHEME):
        raise SourceError(f"model source {uri!r}: expected {EXAMPLE} or {S3_EXAMPLE}")
    repo_id, at, revision = uri.removeprefix(HF_SCHEME).partition("@")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_name_ok(p) for p in parts):
        raise SourceError(
            f"model source {uri!r}: {repo_id!r} is not a Hub repository <org>/<name> (letters, digits, '-', '_', "
            "'.'; no '--' or '..'; at most 96 characters each)"
        )
    if not at or not revision:
        raise SourceError(
            f"model source {uri!r}: name the revision after '@' (a commit, or a branch or tag): a run must say "
            "which weights it trains from"
        )
    if not re.fullmatch(REVISION, revision) or ".." in revision or revision.endswith(("/", ".lock")):
        raise SourceError(f"model source {uri!r}: {revision!r} is not a revision (a commit, branch or tag name)")
    return HubSource(repo_id, revision)


def parse_s3(uri: str) -> S3Source:
    location, at, pin = uri.removeprefix(S3_SCHEME).partition("@")
    bucket, _, prefix = location.partition("/")
    if not re.fullmatch(BUCKET, bucket) or ".." in bucket:
        raise SourceError(f"model source {uri!r}: {bucket!r} is not a bucket name (3 to 63 of a-z, 0-9, '.', '-')")
    prefix = prefix.rstrip("/")
    if not re.fullmatch(PREFIX, prefix):
        raise SourceError(
            f"model source {uri!r}: name the prefix the model's files and its {SUMS} are under "
            "(path components of letters, digits, '.', '_', '-', '=', '+', each starting with a letter or digit)"
        )
    if at and not re.fullmatch(PIN, pin):
        raise SourceError(
            f"model source {uri!r}: after '@' comes the sha256 of {SUMS}, as sha256:<64 lowercase hex> "
            f"(sha256sum {SUMS})"
        )
    return S3Source(bucket, prefix, pin.removeprefix("sha256:") if at else None)


def patterns_key(patterns: Sequence[str]) -> str:
    """A directory per set of file patterns: the same revision with other patterns is another fetch."""
    if not patterns:
        return ""
    return "-" + hashlib.sha256("\n".join(sorted(set(patterns))).encode()).hexdigest()[:8]


def revision_dir(source: Source, patterns: Sequence[str] = ()) -> PurePosixPath:
    """Where, under the cache's root, a pod finds the model's files (``MODEL_PATH``): a directory
    of the commit (of the manifest's sha256), or a link to it for a branch or tag (for an S3
    source not pinned, ``latest``: the manifest as it was at the last fetch)."""
    if isinstance(source, S3Source):
        # "@…": no prefix component starts so, so no other source's directory is named alike
        name = "@" + (source.manifest_sha256 or LATEST)
        return PurePosixPath("s3", source.bucket, *source.prefix.split("/"), name + patterns_key(patterns))
    org, name = source.repo_id.split("/")
    return PurePosixPath("hf", org, name, source.revision.replace("/", "%2F") + patterns_key(patterns))


LATEST = "latest"  # an S3 source not pinned: the link to its manifest's directory


# What the model initializer leaves in its container's termination message, which the trainer
# controller turns into the Trainer's ModelVerified condition: "<Reason>: <message>".
VERIFIED = "Verified"  # the files are in the cache, checked; any other reason is a refusal
MAX_TERMINATION = 4000  # the kubelet keeps 4096 bytes


def termination_message(reason: str, message: str) -> str:
    return f"{reason}: {message}"[:MAX_TERMINATION]


def read_termination(text: str) -> tuple[str, str]:
    """(reason, message) of a termination message; one without a reason (the container died
    before it wrote one: its log's tail) is a ``FetchFailed``."""
    reason, colon, message = text.strip().partition(": ")
    if colon and re.fullmatch(r"[A-Z][A-Za-z]{1,63}", reason):
        return reason, message
    return "FetchFailed", text.strip()


INIT_CONTAINER = "model-init"  # the name of the initializer's container in a training pod
