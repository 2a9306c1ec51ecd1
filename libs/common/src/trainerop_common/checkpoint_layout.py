"""Where checkpoints live, what their data is checked against, and the keys of the Secret that
opens an S3 bucket (pure), as the training-side SDK has them: one definition for the pods that
write and the controller that verifies (re-exported from trainerop_sdk.layout, .credentials and
.checksums)."""

from typing import Any

from trainerop_sdk.checksums import Digest, StoredChecksum
from trainerop_sdk.credentials import ENDPOINT_KEYS
from trainerop_sdk.credentials import KEYS as CREDENTIAL_KEYS
from trainerop_sdk.credentials import REQUIRED_KEYS as REQUIRED_CREDENTIAL_KEYS
from trainerop_sdk.credentials import missing_keys as missing_credential_keys
from trainerop_sdk.layout import (
    MOUNT,
    Claim,
    S3Bucket,
    StorageLocation,
    checkpoint_dir,
    checkpoint_name,
    checkpoint_path,
    copy_key,
    parse_bucket,
)

__all__ = [
    "CREDENTIAL_KEYS",
    "MOUNT",
    "REQUIRED_CREDENTIAL_KEYS",
    "S3_ENDPOINT_KEY",
    "Claim",
    "Digest",
    "S3Bucket",
    "StorageLocation",
    "StoredChecksum",
    "checkpoint_dir",
    "checkpoint_name",
    "checkpoint_path",
    "copy_key",
    "credential_env",
    "missing_credential_keys",
    "parse_bucket",
]


S3_ENDPOINT_KEY = ENDPOINT_KEYS[0]  # AWS_ENDPOINT_URL_S3: the S3-specific endpoint, which wins


def credential_env(secret: str | None) -> list[dict[str, Any]]:
    """The AWS_* variables of a pod that opens S3 with ``secret`` (a checkpoint credentials
    Secret's keys; the region and endpoints optional), each from the Secret, never a value."""
    return [
        {
            "name": key,
            "valueFrom": {
                "secretKeyRef": {
                    "name": secret,
                    "key": key,
                    **({} if key in REQUIRED_CREDENTIAL_KEYS else {"optional": True}),
                }
            },
        }
        for key in CREDENTIAL_KEYS
    ]
