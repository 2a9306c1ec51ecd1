"""Large shards to S3 with boto3's managed transfer (the optional extra ``trainerop-sdk[s3]``):
multipart upload streamed from the file in parts of PART_BYTES, a few parts in flight, each part
retried; so a shard of any size (S3's single PUT stops at 5 GiB) is written without being held in
memory (at most PART_BYTES x THREADS of it). Without boto3 the SDK's own client writes shards of
up to 5 GiB in one streamed PUT (:meth:`trainerop_sdk.s3.S3Client.put_file`)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util

from .s3 import Credentials

PART_BYTES = 16 * 1024**2
THREADS = 4


def available() -> bool:
    """Whether boto3 is installed (pip install 'trainerop-sdk[s3]')."""
    return importlib.util.find_spec("boto3") is not None


def part_bytes(size: int) -> int | None:
    """The size of the parts boto3 uploads a file of ``size`` bytes in (None: one PUT, below
    PART_BYTES; boto3 doubles the part size of a file that would need more than 10 000 parts)."""
    if size < PART_BYTES:
        return None
    from s3transfer.utils import ChunksizeAdjuster

    adjusted: int = ChunksizeAdjuster().adjust_chunksize(PART_BYTES, size)
    return adjusted


class PartsHasher:
    """S3's checksum of a multipart upload, computed from the file as it is read: the sha256 of
    the parts' sha256 digests, base64, then "-" and the number of parts."""

    def __init__(self, part: int) -> None:
        self.part = part
        self.digests: list[bytes] = []
        self._current = hashlib.sha256()
        self._filled = 0

    def update(self, chunk: bytes) -> None:
        while chunk:
            take = chunk[: self.part - self._filled]
            self._current.update(take)
            self._filled += len(take)
            chunk = chunk[len(take) :]
            if self._filled == self.part:
                self._next()

    def _next(self) -> None:
        self.digests.append(self._current.digest())
        self._current, self._filled = hashlib.sha256(), 0

    def checksum(self) -> str:
        if self._filled:
            self._next()
        combined = base64.b64encode(hashlib.sha256(b"".join(self.digests)).digest()).decode()
        return f"{combined}-{len(self.digests)}"


def upload_file(creds: Credentials, bucket: str, key: str, path: str) -> None:
    """Write the object ``key`` from the file ``path`` (multipart above PART_BYTES)."""
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=creds.endpoint,
        region_name=creds.region,
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        config=Config(
            s3={"addressing_style": "path"},  # as the SDK's own client: any S3-compatible server
            retries={"mode": "standard", "max_attempts": 5},
            # botocore's newer default checksums (CRC32 in a trailer) are not understood by every
            # S3-compatible server: the upload asks for SHA256 itself (below).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )
    transfer = TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=THREADS, use_threads=True
    )
    # S3 checks each request's data against its SHA256 and stores it: a file in one PUT keeps the
    # whole file's sha256; a multipart upload the sha256 of its parts' ones ("<base64>-<parts>"),
    # which the writer reports too (PartsHasher). The operator compares either without reading.
    client.upload_file(path, bucket, key, Config=transfer, ExtraArgs={"ChecksumAlgorithm": "SHA256"})
