"""AWS Signature Version 4 as AWS documents it (the S3 "GET Object" example), so the SDK's
client is accepted by any real S3 endpoint."""

import hashlib
from datetime import UTC, datetime

import pytest

from trainerop_sdk.s3 import EMPTY_SHA256, Credentials, checksum_header, signature_headers, whole_object_sha256

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


@pytest.mark.parametrize(
    ("stored", "sha256"),
    [
        (HELLO_B64, HELLO),  # a whole object's (one PUT): usable
        (None, None),  # none stored (written without one, or a server that keeps none)
        ("", None),
        ("SDVxpu2ToDLAnjC47+zayOSqIoJ/+lQvLjGp0+5iERs=-3", None),  # multipart: a checksum of 3 parts' ones
        ("not base64!", None),
        ("AAAA", None),  # base64, but not 32 bytes
    ],
)
def test_only_a_whole_objects_stored_sha256_stands_for_its_data(stored: str | None, sha256: str | None) -> None:
    assert whole_object_sha256(stored) == sha256
