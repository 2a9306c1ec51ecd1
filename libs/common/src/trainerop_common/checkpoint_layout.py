"""Where checkpoints live, what their data is checked against, and the keys of the Secret that
opens an S3 bucket (pure), as the training-side SDK has them: one definition for the pods that
write and the controller that verifies (re-exported from trainerop_sdk.layout, .credentials and
.checksums)."""

from trainerop_sdk.checksums import Digest, StoredChecksum
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
    "Claim",
    "Digest",
    "S3Bucket",
    "StorageLocation",
    "StoredChecksum",
    "checkpoint_dir",
    "checkpoint_name",
    "checkpoint_path",
    "copy_key",
    "missing_credential_keys",
    "parse_bucket",
]
