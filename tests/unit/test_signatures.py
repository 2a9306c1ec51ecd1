"""cosign's stored image signatures checked (trainerop_common.signatures), table by table: payloads
and layers made as cosign makes them (sigstore's simple-signing payload, an ECDSA P-256 signature
of its exact bytes); tests/integration/test_signing.py checks what the real cosign stored."""

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from trainerop_common.signatures import (
    SIGNATURE_ANNOTATION,
    SIGNATURE_TYPE,
    SIMPLE_SIGNING,
    PublicKeyError,
    load_key,
    signature_tag,
    verify,
)

DIGEST = "sha256:" + "a" * 64
MOVED = "sha256:" + "b" * 64
PRIVATE = {name: ec.generate_private_key(ec.SECP256R1()) for name in ("team", "other")}
KEYS = {
    name: load_key(
        name, key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for name, key in PRIVATE.items()
}


def payload(digest: str = DIGEST, type_: str = SIGNATURE_TYPE) -> bytes:
    """cosign's payload (sigstore's simple signing), as cosign writes it."""
    claim = {
        "identity": {"docker-reference": "registry/app"},
        "image": {"docker-manifest-digest": digest},
        "type": type_,
    }
    return json.dumps({"critical": claim, "optional": None}).encode()


def layer(signer: str, body: bytes, signature: str | None = None) -> tuple[dict[str, Any], bytes]:
    signed = PRIVATE[signer].sign(body, ec.ECDSA(hashes.SHA256()))
    annotation = base64.b64encode(signed).decode() if signature is None else signature
    found = {
        "mediaType": SIMPLE_SIGNING,
        "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
        "size": len(body),
        "annotations": {SIGNATURE_ANNOTATION: annotation},
    }
    return found, body


def registry(
    *layers: tuple[dict[str, Any], bytes], served: bytes | None = None
) -> tuple[dict[str, Any], Callable[[str], bytes]]:
    """The ``.sig`` manifest of ``layers`` and a registry's blob lookup (``served``: other bytes for every blob)."""
    blobs = {found["digest"]: body for found, body in layers}
    manifest = {"schemaVersion": 2, "layers": [found for found, _ in layers]}
    return manifest, lambda digest: served if served is not None else blobs[digest]


# the signature manifest, the policy's keys -> the key it holds for, or the start of why not
CASES = [
    ("by the team's key", registry(layer("team", payload())), ["team"], "team"),
    ("by one of two keys", registry(layer("team", payload())), ["other", "team"], "team"),
    ("by another key", registry(layer("other", payload())), ["team"], "it is signed, but by none of the policy's keys"),
    ("one of two signatures holds", registry(layer("other", payload()), layer("team", payload())), ["team"], "team"),
    (
        "the tag moved after signing",
        registry(layer("team", payload(MOVED))),
        ["team"],
        f"signed by team for {MOVED}, not for {DIGEST}: the tag moved after signing",
    ),
    ("not an image signature", registry(layer("team", payload(type_="other"))), ["team"], "signed by team, but not as"),
    ("payload swapped", registry(layer("team", payload()), served=payload(MOVED)), ["team"], "a signature's payload"),
    ("a garbled signature", registry(layer("team", payload(), signature="%%%")), ["team"], "a signature is not base64"),
    ("no signature layer", ({"layers": [{"mediaType": "text/plain"}]}, lambda _: b""), ["team"], "its signature"),
]  # fmt: skip


@pytest.mark.parametrize(("signatures", "keys", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_signature_holds_only_by_a_policy_key_over_the_images_digest(
    signatures: tuple[dict[str, Any], Callable[[str], bytes]], keys: list[str], expected: str
) -> None:
    manifest, blob = signatures
    verdict = verify(manifest, blob, [KEYS[k] for k in keys], DIGEST)
    if expected in KEYS:
        assert (verdict.signed_by, verdict.why) == (expected, f"signed by {expected}")
    else:
        assert verdict.signed_by is None
        assert verdict.why.startswith(expected), verdict.why


def test_signatures_live_under_the_digests_sig_tag() -> None:
    assert signature_tag(DIGEST) == "sha256-" + "a" * 64 + ".sig"


@pytest.mark.parametrize("pem", [b"not a key", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"])
def test_a_key_that_cannot_be_read_is_named(pem: bytes) -> None:
    with pytest.raises(PublicKeyError, match="public key 'team' cannot be read"):
        load_key("team", pem)
