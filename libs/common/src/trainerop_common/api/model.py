"""A run's model: weights every replica starts from, fetched and checked once per revision
(docs/models.md); a Trainer's spec.model, or its profile's. From the Hugging Face Hub, or from S3
against a manifest of sha256 sums."""

from typing import Annotated

from pydantic import Field

from trainerop_sdk.models import EXAMPLE as MODEL_SOURCE_EXAMPLE
from trainerop_sdk.models import S3_EXAMPLE, SUMS
from trainerop_sdk.models import SOURCE_PATTERN as MODEL_SOURCE_PATTERN

from .base import K8sModel, ObjectName, cel

MAX_MODEL_PATTERNS = 32


class ModelSpec(K8sModel):
    """Weights every replica starts from, fetched and checked once per revision (docs/models.md)."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "!self.source.startsWith('s3://') || has(self.credentialsSecret)",
                    "an s3:// source needs credentialsSecret (a Secret with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
                    "and AWS_ENDPOINT_URL)",
                ),
                cel(
                    "!has(self.credentialsSecret) || self.source.startsWith('s3://')",
                    "credentialsSecret is for s3:// sources; a Hub model's token is tokenSecret",
                ),
                cel(
                    "!has(self.tokenSecret) || self.source.startsWith('hf://')",
                    "tokenSecret is for hf:// sources; an S3 source's credentials are credentialsSecret",
                ),
            ]
        }
    }

    source: str = Field(
        max_length=512,
        pattern=MODEL_SOURCE_PATTERN,
        description=f"{MODEL_SOURCE_EXAMPLE}: a Hugging Face Hub model repository at a commit, branch or tag; or "
        f"{S3_EXAMPLE}: the files {SUMS} under that prefix lists, each checked against its sha256 (pinned: "
        f"{SUMS} itself must hash to that).",
    )
    files: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None,
        max_length=MAX_MODEL_PATTERNS,
        description="Shell globs of the files wanted ('*.safetensors'; one ending in '/' takes a folder). "
        "Unset: every file of the revision.",
    )
    token_secret: ObjectName | None = Field(
        default=None,
        description="For a private or gated model: a Secret in the Trainer's namespace whose key HF_TOKEN the "
        "initializer gets as its environment (no controller reads it).",
    )
    credentials_secret: ObjectName | None = Field(
        default=None,
        description="For an s3:// source: a Secret in the Trainer's namespace with AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL and optionally AWS_REGION (a checkpoint credentials Secret's "
        "keys), which the initializer alone gets as its environment.",
    )
    cache_claim: ObjectName = Field(
        description="A PersistentVolumeClaim in the Trainer's namespace that holds the fetched revisions, shared "
        "by its runs (ReadWriteMany when a run spans nodes); the initializer writes it, training reads it.",
    )
    mount_path: str = Field(
        default="/models",
        pattern=r"^/[^:]*$",
        max_length=256,
        description="Where the training container finds the cache, read-only; MODEL_PATH names the revision's "
        "directory under it.",
    )
    endpoint: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^https?://[^\s]+$",
        description="The Hub's address (a mirror, a private Hub); unset: the trainer controller's --hf-endpoint. "
        "For an s3:// source: the S3 endpoint, over the Secret's AWS_ENDPOINT_URL.",
    )
