"""Large shards to S3 with boto3's managed transfer (the optional extra ``trainerop-sdk[s3]``):
multipart upload streamed from the file in parts of PART_BYTES, a few parts in flight, each part
retried; so a shard of any size (S3's single PUT stops at 5 GiB) is written without being held in
memory (at most PART_BYTES x THREADS of it). Without boto3 the SDK's own client writes shards of
up to 5 GiB in one streamed PUT (:meth:`trainerop_sdk.s3.S3Client.put_file`)."""

from __future__ import annotations

import importlib.util

from .s3 import Credentials

PART_BYTES = 16 * 1024**2
THREADS = 4


def available() -> bool:
    """Whether boto3 is installed (pip install 'trainerop-sdk[s3]')."""
    return importlib.util.find_spec("boto3") is not None


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
    # whole file's sha256, which the operator then verifies without reading the data; a multipart
    # upload keeps a checksum of its parts' checksums ("<base64>-<parts>"), which it cannot compare
    # with the shard's reported sha256, so it reads those.
    client.upload_file(path, bucket, key, Config=transfer, ExtraArgs={"ChecksumAlgorithm": "SHA256"})
