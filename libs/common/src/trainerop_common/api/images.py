"""The ``ImagePolicy`` kind (namespaced): which training images of the namespace must be signed,
and by which keys (docs/image-verification.md)."""

from typing import Annotated, Literal

from pydantic import Field

from trainerop_sdk.names import DNS_LABEL

from .base import Conditions, K8sModel, list_map

PolicyMode = Literal["Enforce", "Warn"]
ImageGlob = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[a-z0-9*?.:/_\[\]-]+$")]
PEM_PUBLIC_KEY = r"^\s*-----BEGIN PUBLIC KEY-----[A-Za-z0-9+/=\s]+-----END PUBLIC KEY-----\s*$"


class PublicKey(K8sModel):
    """A signer's public key (cosign.pub: PEM, PKIX; ECDSA P-256 as cosign makes them)."""

    name: str = Field(
        pattern=DNS_LABEL, max_length=63, description="How the key is named in conditions and status (signedBy)."
    )
    pem: str = Field(
        min_length=64,
        max_length=4096,
        pattern=PEM_PUBLIC_KEY,
        description="The public key, PEM (-----BEGIN PUBLIC KEY-----); public keys are not secrets.",
    )


class ImagePolicySpec(K8sModel):
    """Which images of the namespace the policy governs, the keys that may sign them, and what a failure does."""

    images: list[ImageGlob] = Field(
        default_factory=lambda: ["*"],
        min_length=1,
        max_length=64,
        json_schema_extra={"default": ["*"]},
        description="Globs of the images it governs, matched against the full name without tag or digest "
        "(docker.io/library/jax; '*' matches across '/'); default: every image.",
    )
    keys: list[PublicKey] = Field(
        min_length=1,
        json_schema_extra=list_map("name", 16),
        description="An image is accepted when a cosign signature of its digest holds for one of these keys.",
    )
    mode: PolicyMode = Field(
        default="Enforce",
        json_schema_extra={"default": "Enforce"},
        description="Enforce: a run with an image that fails gets no pods (ImagesVerified False, Unschedulable); "
        "Warn: it runs, with a Warning Event and the failure in status.",
    )


class ImagePolicyStatus(K8sModel):
    """Written by the verify controller."""

    conditions: Conditions | None = None


class ImagePolicy(K8sModel):
    """Signatures the training images of a namespace must carry."""

    spec: ImagePolicySpec
    status: ImagePolicyStatus | None = None
