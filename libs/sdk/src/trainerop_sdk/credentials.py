"""The keys of a checkpoint credentials Secret (pure; docs/checkpoints.md): one definition for the
S3 client in the pods, the checkpoint controller that judges the Secret and the variables it gives
the pods."""

from collections.abc import Mapping

# A checkpoint credentials Secret's keys (docs/checkpoints.md); pods get each as a variable.
REQUIRED_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
ENDPOINT_KEYS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the S3-specific one wins
KEYS = (*REQUIRED_KEYS, *ENDPOINT_KEYS, "AWS_REGION")


def missing_keys(secret: Mapping[str, str]) -> list[str]:
    """What a checkpoint credentials Secret lacks: both keys, and an endpoint (the operator never
    guesses AWS's)."""
    missing = [k for k in REQUIRED_KEYS if not secret.get(k)]
    return missing + ([] if any(secret.get(k) for k in ENDPOINT_KEYS) else ["AWS_ENDPOINT_URL"])
