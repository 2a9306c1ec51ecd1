"""Images signed with the real cosign in the local registry, and those signatures read back as the
operator reads them (trainerop_common.signatures): what cosign verifies, the operator accepts; a
signature of another key, an unsigned image and a tag moved after signing are refused by both
(docs/design/trusted-artifacts.md, decisions 1 to 3)."""

import json
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import pytest

from testbed import cosign, registry
from tests.integration.registry_images import push_small_image, registry_request
from trainerop_common.signatures import load_key, signature_tag, verify

REPOSITORY = "docker.io/library/trainer-operator-signing-check"


def pushed(tmp_path: Path, tag: str) -> str:
    """A small image pushed to the registry under ``tag``; its digest."""
    return push_small_image(tmp_path, f"{REPOSITORY}:{tag}")


def signature_manifest(digest: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(registry_request(f"{REPOSITORY}/manifests/{signature_tag(digest)}"))
    return found


def blob(digest: str) -> bytes:
    return registry_request(f"{REPOSITORY}/blobs/{digest}", accept="*/*")


def test_what_cosign_signs_and_verifies_the_operator_verifies_too(local_registry: str, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    signed, unsigned = pushed(tmp_path, f"signed-{run}"), pushed(tmp_path, f"unsigned-{run}")
    team = cosign.key_pair(tmp_path / "keys", "team", "team-password")
    other = cosign.key_pair(tmp_path / "keys", "other", "")
    image = f"{registry.mirror_path(REPOSITORY)}@{signed}"
    cosign.sign(team, image)

    # cosign's own verdicts
    assert cosign.verify(team.public, image).returncode == 0
    refused = cosign.verify(other.public, image)
    assert refused.returncode != 0
    assert "no matching signatures" in refused.stderr
    assert cosign.verify(team.public, f"{registry.mirror_path(REPOSITORY)}@{unsigned}").returncode != 0

    # the operator's, from the same bytes in the registry
    keys = {k.public.stem: load_key(k.public.stem, k.public.read_bytes()) for k in (team, other)}
    manifest = signature_manifest(signed)
    assert verify(manifest, blob, [keys["team"]], signed).signed_by == "team"
    assert verify(manifest, blob, [keys["other"]], signed).why == "it is signed, but by none of the policy's keys"
    moved = verify(manifest, blob, [keys["team"]], unsigned)  # as if the tag now named the unsigned image
    assert moved.signed_by is None
    assert moved.why == f"signed by team for {signed}, not for {unsigned}: the tag moved after signing"
    with pytest.raises(urllib.error.HTTPError) as missing:  # unsigned: no signature tag at all
        signature_manifest(unsigned)
    assert missing.value.code == 404
