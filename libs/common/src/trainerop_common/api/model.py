"""A run's model: weights every replica starts from, fetched and checked once per revision
(docs/models.md); a Trainer's spec.model, or its profile's."""

from typing import Annotated

from pydantic import Field

from trainerop_sdk.models import EXAMPLE as MODEL_SOURCE_EXAMPLE
from trainerop_sdk.models import SOURCE_PATTERN as MODEL_SOURCE_PATTERN

from .base import K8sModel, ObjectName

MAX_MODEL_PATTERNS = 32


class ModelSpec(K8sModel):
    """Weights every replica starts from, fetched and checked once per revision (docs/models.md)."""

    source: str = Field(
        max_length=512,
        pattern=MODEL_SOURCE_PATTERN,
        description=f"{MODEL_SOURCE_EXAMPLE}: a Hugging Face Hub model repository at a commit, branch or tag.",
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
        description="The Hub's address (a mirror, a private Hub). Unset: the trainer controller's --hf-endpoint.",
    )
