"""AWS Signature Version 4 as AWS documents it (the S3 "GET Object" example), so the SDK's
client is accepted by any real S3 endpoint."""

import hashlib
from datetime import UTC, datetime

import pytest

from trainerop_sdk.checksums import StoredChecksum, checksum_header, parse_stored_checksum
from trainerop_sdk.s3 import EMPTY_SHA256, Credentials, signature_headers
from trainerop_sdk.s3_multipart import PART_BYTES, PartsHasher, part_bytes

AWS_EXAMPLE = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", "us-east-1")


def test_the_documented_get_object_example_signs_identically() -> None:
    headers = signature_headers(
        AWS_EXAMPLE,
        "GET",
        "https://examplebucket.s3.amazonaws.com/test.txt",
        EMPTY_SHA256,
        datetime(2013, 5, 24, tzinfo=UTC),
        {"Range": "bytes=0-9"},
    )
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_the_documented_list_objects_example_signs_identically() -> None:
    headers = signature_headers(
        AWS_EXAMPLE,
        "GET",
        "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
        EMPTY_SHA256,
        datetime(2013, 5, 24, tzinfo=UTC),
    )
    assert headers["authorization"].endswith(
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    )


def test_credentials_come_from_the_usual_variables() -> None:
    env = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": "http://s3.local:8333/"}
    creds = Credentials.from_env(env)
    assert (creds.endpoint, creds.region) == ("http://s3.local:8333", "us-east-1")
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY"):
        Credentials.from_env({"AWS_ACCESS_KEY_ID": "a"})


HELLO = hashlib.sha256(b"hello world").hexdigest()
HELLO_B64 = "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="  # the same digest, as S3 returns it


def test_a_put_asks_s3_to_check_and_keep_the_sha256_and_signs_that() -> None:
    extra = checksum_header(HELLO)
    assert extra == {"x-amz-checksum-sha256": HELLO_B64}
    headers = signature_headers(
        AWS_EXAMPLE, "PUT", "https://s3.local/b/k", HELLO, datetime(2026, 1, 1, tzinfo=UTC), extra
    )
    assert "SignedHeaders=host;x-amz-checksum-sha256;x-amz-content-sha256;x-amz-date," in headers["authorization"]


PARTS = "SDVxpu2ToDLAnjC47+zayOSqIoJ/+lQvLjGp0+5iERs=-3"  # SeaweedFS's, for a 40 MiB upload in 3 parts


@pytest.mark.parametrize(
    ("header", "stored"),
    [
        (HELLO_B64, StoredChecksum(11, sha256=HELLO)),  # a whole object's (one PUT)
        (PARTS, StoredChecksum(11, parts_sha256=PARTS)),  # a multipart upload's: the sha256 of 3 parts' ones
        (None, StoredChecksum(11)),  # none kept (written without one, or a server that keeps none)
        ("", StoredChecksum(11)),
        ("not base64!", StoredChecksum(11)),
        ("AAAA", StoredChecksum(11)),  # base64, but not 32 bytes
        (HELLO_B64 + "-0", StoredChecksum(11)),
        (HELLO_B64 + "-x", StoredChecksum(11)),
    ],
)
def test_a_stored_checksum_is_read_from_a_heads_header(header: str | None, stored: StoredChecksum) -> None:
    assert parse_stored_checksum(header, 11) == stored


def test_a_multipart_uploads_checksum_does_not_depend_on_how_the_file_is_read() -> None:
    data = bytes(range(256)) * 41  # 10 496 bytes: parts of 4096, 4096, 2304
    checksums = set()
    for chunk in (1, 1000, 4096, 5000, len(data)):
        hasher = PartsHasher(4096)
        for start in range(0, len(data), chunk):
            hasher.update(data[start : start + chunk])
        checksums.add(hasher.checksum())
    (checksum,) = checksums
    assert checksum.endswith("-3")
    assert parse_stored_checksum(checksum, len(data)).parts_sha256 == checksum  # the form S3 returns


@pytest.mark.parametrize(
    ("size", "part"),
    [
        (PART_BYTES - 1, None),  # one PUT
        (PART_BYTES, PART_BYTES),  # boto3 goes multipart at its threshold
        (40 << 20, PART_BYTES),
        (12 * 10**9, PART_BYTES),  # 716 parts
        (200 << 30, 2 * PART_BYTES),  # 12 800 parts of 16 MiB would exceed S3's 10 000
    ],
)
def test_the_part_size_is_the_one_boto3_uploads_with(size: int, part: int | None) -> None:
    assert part_bytes(size) == part
