"""Where checkpoints live (pure: no I/O), shared by the training pods and the checkpoint controller.

    <CHECKPOINT_DIR>/step-0000001200/shard-00003/copy-1

``spec.checkpoint.bucket`` is parsed once (:func:`parse_bucket`) into a typed location: an S3
bucket and prefix, or a PersistentVolumeClaim. CHECKPOINT_DIR is ``/checkpoints/<trainer>`` on a
claim mounted at /checkpoints, or ``s3://<bucket>/<prefix>/<namespace>/<trainer>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .names import DNS_SUBDOMAIN, MAX_NAME

MOUNT = "/checkpoints"
S3_SCHEME = "s3://"
S3_BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
# A prefix segment: letters, digits, '.', '_' and '-', never starting with a dot, so no '.' or '..'
# can climb out of the prefix (and no '#', '?' or '%' can make two paths one).
PREFIX_SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
# RE2-compatible: the CRD's CEL rule uses the same pattern.
S3_URI = rf"^s3://({S3_BUCKET})((?:/{PREFIX_SEGMENT})*)/?$"
_S3_URI = re.compile(S3_URI)
_CLAIM = re.compile(DNS_SUBDOMAIN)


@dataclass(frozen=True)
class S3Bucket:
    """Checkpoints under a prefix of an S3 bucket."""

    bucket: str
    prefix: str = ""  # without leading or trailing '/'

    @property
    def uri(self) -> str:
        return f"{S3_SCHEME}{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


@dataclass(frozen=True)
class Claim:
    """Checkpoints on a PersistentVolumeClaim in the Trainer's namespace, mounted at /checkpoints."""

    name: str


StorageLocation = S3Bucket | Claim


def parse_s3_uri(uri: str) -> S3Bucket:
    """``s3://bucket/some/prefix`` -> S3Bucket("bucket", "some/prefix"); ValueError if it is not one."""
    match = _S3_URI.match(uri)
    if match is None:
        raise ValueError(
            f"{uri!r} is not an s3://bucket/prefix URI (prefix segments: letters, digits, '.', '_' and '-', "
            "not starting with '.')"
        )
    return S3Bucket(match.group(1), match.group(2).strip("/"))


def parse_bucket(text: str) -> StorageLocation:
    """``spec.checkpoint.bucket``: an s3:// URI, else the name of a PersistentVolumeClaim."""
    if text.startswith(S3_SCHEME):
        return parse_s3_uri(text)
    if len(text) > MAX_NAME or not _CLAIM.match(text):
        raise ValueError(f"{text!r} is neither an s3://bucket/prefix URI nor a PersistentVolumeClaim name")
    return Claim(text)


def checkpoint_dir(location: StorageLocation, namespace: str, trainer: str) -> str:
    """The Trainer's own directory in its checkpoint storage."""
    if isinstance(location, S3Bucket):
        return f"{location.uri}/{namespace}/{trainer}"
    return f"{MOUNT}/{trainer}"


def checkpoint_path(directory: str, step: int) -> str:
    return f"{directory.rstrip('/')}/step-{step:010d}"


def checkpoint_name(trainer: str, step: int) -> str:
    """The Checkpoint object of a step (one per step: every shard writer reports into it)."""
    return f"{trainer}-step-{step}"


def copy_key(shard: int, copy: int) -> str:
    """A shard copy's key, relative to the checkpoint's path."""
    return f"shard-{shard:05d}/copy-{copy}"
