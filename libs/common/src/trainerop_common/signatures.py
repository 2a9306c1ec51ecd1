"""cosign's key-pair image signatures, read as cosign stores them and checked (pure; the registry's
bytes are passed in): docs/design/trusted-artifacts.md, decisions 2 and 3.

cosign (v2's default storage, v3's with ``--new-bundle-format=false``) keeps the signatures of the
image ``<repo>@sha256:<hex>`` under the tag ``sha256-<hex>.sig`` of the same repository: an OCI
manifest with one layer per signature, each layer a simple-signing payload (JSON naming the signed
manifest's digest) and the annotation ``dev.cosignproject.cosign/signature``, the base64 ECDSA
signature of the payload's exact bytes. The signature is checked with securesystemslib (the
in-toto and TUF authors' library that sigstore's Python client builds on: sigstore-python itself
verifies only certificate-bound signatures with a transparency-log entry); the payload is read
only after its signature holds. The cryptography libraries are imported when a key is first
read: a controller that never meets a policy does not hold them (10 MiB and more)."""

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from securesystemslib.signer import SSlibKey

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
MAX_LAYERS = 32  # signatures read of one image: a tag anyone may push to must not cost without bound


class PublicKeyError(ValueError):
    """A public key that cannot be read; the message says which."""


def signature_tag(digest: str) -> str:
    """The tag cosign keeps ``digest``'s signatures under: ``sha256-<hex>.sig``."""
    algorithm, _, hex_ = digest.partition(":")
    return f"{algorithm}-{hex_}.sig"


def load_key(name: str, pem: bytes) -> "SSlibKey":
    """A public key (``cosign.pub``: PEM, PKIX) as securesystemslib verifies with it."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    try:
        return SSlibKey.from_crypto(load_pem_public_key(pem), keyid=name)
    except (ValueError, TypeError, UnsupportedAlgorithm) as err:  # not PEM; a key type without a scheme
        raise PublicKeyError(f"public key {name!r} cannot be read: {err}") from None


@dataclass(frozen=True)
class Verdict:
    signed_by: str | None  # the key a signature of the digest holds for; None: refused
    why: str  # what holds, or why not (the first refusal among the layers)


def verify(
    manifest: Mapping[str, Any], blob: Callable[[str], bytes], keys: Sequence["SSlibKey"], digest: str
) -> Verdict:
    """Whether one signature of the ``.sig`` ``manifest`` is by one of ``keys`` over ``digest``;
    ``blob(digest)`` returns a layer's bytes from the registry."""
    layers = [layer for layer in manifest.get("layers") or () if layer.get("mediaType") == SIMPLE_SIGNING]
    if not layers:
        return Verdict(None, "its signature manifest holds no cosign signature")
    reasons = []
    for layer in layers[:MAX_LAYERS]:
        verdict = verify_layer(layer, blob, keys, digest)
        if verdict.signed_by is not None:
            return verdict
        reasons.append(verdict.why)
    return Verdict(None, reasons[0])


def verify_layer(
    layer: Mapping[str, Any], blob: Callable[[str], bytes], keys: Sequence["SSlibKey"], digest: str
) -> Verdict:
    """One signature: its payload is the layer's bytes, its signature is by a key, and the payload
    names ``digest`` as a cosign image signature."""
    payload = blob(str(layer.get("digest", "")))
    if "sha256:" + hashlib.sha256(payload).hexdigest() != layer.get("digest"):
        return Verdict(None, "a signature's payload is not the blob its manifest names")
    try:
        signature = base64.b64decode((layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION, ""), validate=True)
    except (binascii.Error, ValueError):
        return Verdict(None, "a signature is not base64")
    signer = next((key.keyid for key in keys if holds(key, signature, payload)), None)
    if signer is None:
        return Verdict(None, "it is signed, but by none of the policy's keys")
    claim = signed_claim(payload)
    if claim.get("type") != SIGNATURE_TYPE:
        return Verdict(None, f"signed by {signer}, but not as a container image signature")
    signed = (claim.get("image") or {}).get("docker-manifest-digest")
    if signed != digest:
        return Verdict(None, f"signed by {signer} for {signed}, not for {digest}: the tag moved after signing")
    return Verdict(signer, f"signed by {signer}")


def holds(key: "SSlibKey", signature: bytes, payload: bytes) -> bool:
    from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
    from securesystemslib.signer import Signature

    try:
        key.verify_signature(Signature(key.keyid, signature.hex()), payload)
    except (UnverifiedSignatureError, VerificationError):
        return False
    return True


def signed_claim(payload: bytes) -> Mapping[str, Any]:
    """The ``critical`` part of a simple-signing payload (its signature already checked)."""
    try:
        found = json.loads(payload)
    except ValueError:
        return {}
    critical = found.get("critical") if isinstance(found, dict) else None
    return critical if isinstance(critical, dict) else {}
