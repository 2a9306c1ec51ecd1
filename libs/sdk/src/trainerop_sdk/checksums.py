"""What a checkpoint's data is checked against (pure): the sha256 read from an object, the
checksum S3 stored for it, and the header that has S3 check a PUT (one definition for the SDK
that writes and the controller that verifies)."""

from __future__ import annotations

import base64
import hashlib
from typing import NamedTuple

SHA256_HEADER = "x-amz-checksum-sha256"


class Digest(NamedTuple):
    """An object's sha256 (hex) and size, its data read and hashed."""

    sha256: str
    size: int


class StoredChecksum(NamedTuple):
    """What S3 says of an object without its data being read: its size, and the checksum S3
    checked the data against when it was written and kept — the whole object's sha256 (hex) after
    one PUT, or a multipart upload's, the sha256 of its parts' sha256s ("<base64>-<parts>")."""

    size: int
    sha256: str | None = None
    parts_sha256: str | None = None


def checksum_header(sha256_hex: str) -> dict[str, str]:
    """The header that has S3 check a PUT's data against its sha256 and store it (S3 answers
    400 BadDigest to data that does not match)."""
    return {SHA256_HEADER: base64.b64encode(bytes.fromhex(sha256_hex)).decode()}


def parse_stored_checksum(header: str | None, size: int) -> StoredChecksum:
    """The x-amz-checksum-sha256 header of a HEAD, as :class:`StoredChecksum` (anything else than
    32 bytes of base64, or that and "-<parts>", is no checksum at all)."""
    whole, dash, parts = (header or "").partition("-")
    try:
        digest = base64.b64decode(whole, validate=True)
    except ValueError:
        return StoredChecksum(size)
    if len(digest) != hashlib.sha256().digest_size:
        return StoredChecksum(size)
    if not dash:
        return StoredChecksum(size, sha256=digest.hex())
    return StoredChecksum(size, parts_sha256=header) if parts.isdigit() and int(parts) > 0 else StoredChecksum(size)
