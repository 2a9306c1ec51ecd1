"""The verify controller against the real registry and the real cosign (docs/image-verification.md):
an ImagePolicy's runs get pods only for images a policy key signed, and those pods pull the digest
that was verified; unsigned images, another key's signature and a signature carried over to a
moved tag are refused with the image named; a registry that does not answer holds the run until
it does; a run scaled up after its tag moved pulls the digest it was let through with, old pods
and new."""

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import cosign, registry
from tests.factories import trainer_manifest
from tests.harness import Cluster, condition, eventually
from tests.integration.registry_images import push_small_image, registry_request
from trainerop_common.contracts import REPLICA_TYPE_LABEL
from trainerop_common.signatures import signature_tag

REPOSITORY = "docker.io/library/trainer-operator-verify-check"
GOVERNED = "docker.io/library/trainer-operator-verify-*"


@dataclass(frozen=True)
class Signed:
    team: cosign.KeyPair
    other: cosign.KeyPair
    tags: dict[str, str]  # what -> tag (signed, moved, later, first, second: by the team's key; other: by another key)
    digests: dict[str, str]


@pytest.fixture(scope="module")
def signed(local_registry: str, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    tmp = tmp_path_factory.mktemp("verify")
    run = uuid.uuid4().hex[:8]
    team = cosign.key_pair(tmp / "keys", "team", "team-password")
    other = cosign.key_pair(tmp / "keys", "other", "")
    whats = ("signed", "other", "unsigned", "moved", "target", "later", "first", "second")
    tags = {what: f"{what}-{run}" for what in whats}
    digests = {what: push_small_image(tmp, f"{REPOSITORY}:{tag}") for what, tag in tags.items()}
    signers = (("signed", team), ("moved", team), ("later", team), ("first", team), ("second", team), ("other", other))
    for what, keys in signers:
        cosign.sign(keys, f"{registry.mirror_path(REPOSITORY)}@{digests[what]}")
    return Signed(team, other, tags, digests)


@pytest.fixture
def image_policy(cluster: Cluster, namespace: str, signed: Signed) -> Any:
    """Applies the namespace's ImagePolicy: the team's key, over this module's images."""

    def apply(mode: str = "Enforce", name: str = "signed-images") -> None:
        key = {"name": "team", "pem": signed.team.public.read_text()}
        spec = {"images": [GOVERNED], "keys": [key], "mode": mode}
        cluster.apply(
            {
                "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
                "kind": "ImagePolicy",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
        )

    return apply


def run(cluster: Cluster, namespace: str, name: str, tag: str) -> None:
    cluster.apply(trainer_manifest(name, namespace=namespace, image=f"trainer-operator-verify-check:{tag}"))


def verified(cluster: Cluster, namespace: str, name: str, status: str) -> dict[str, Any]:
    def check() -> dict[str, Any]:
        found = condition(cluster.get("trainer", name, namespace), "ImagesVerified")
        return found if found.get("status") == status else {}

    return eventually(check, what=f"ImagesVerified {status} on {name}")


def pod_images(cluster: Cluster, namespace: str, name: str, role: str = "") -> list[str]:
    selector = f"trainer-name={name}" + (f",{REPLICA_TYPE_LABEL}={role}" if role else "")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))
    return [c["image"] for p in pods["items"] for c in p["spec"]["containers"]]


def warnings(cluster: Cluster, namespace: str, reason: str) -> list[str]:
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return [e["message"] for e in events if e["type"] == "Warning" and e["reason"] == reason]


def test_a_signed_image_runs_by_the_digest_that_was_verified(
    cluster: Cluster, namespace: str, signed: Signed, image_policy: Any
) -> None:
    image_policy()
    run(cluster, namespace, "signed", signed.tags["signed"])
    gate = verified(cluster, namespace, "signed", "True")
    assert gate["reason"] == "Verified"
    assert "signed by team" in gate["message"]
    pinned = f"{REPOSITORY}@{signed.digests['signed']}"
    assert eventually(lambda: pod_images(cluster, namespace, "signed")) == [pinned]
    (check,) = cluster.get("trainer", "signed", namespace)["status"]["verify"]["images"]
    assert (check["digest"], check["signedBy"], check["policies"]) == (
        signed.digests["signed"],
        ["team"],
        ["signed-images"],
    )
    policy = eventually(lambda: condition(cluster.get("imagepolicy", "signed-images", namespace), "Valid"))
    assert (policy["status"], policy["reason"]) == ("True", "Accepted")


@pytest.mark.parametrize(
    ("what", "says"),
    [
        ("unsigned", "it has no cosign signature (no sha256-"),
        ("other", "it is signed, but by none of the policy's keys (ImagePolicy 'signed-images' (Enforce))"),
    ],
)
def test_an_image_without_a_signature_of_a_policy_key_gets_no_pods(
    cluster: Cluster, namespace: str, signed: Signed, image_policy: Any, what: str, says: str
) -> None:
    image_policy()
    run(cluster, namespace, what, signed.tags[what])
    gate = verified(cluster, namespace, what, "False")
    assert gate["reason"] == "Unschedulable"
    assert gate["message"].startswith(f"image trainer-operator-verify-check:{signed.tags[what]} (sha256:")
    assert says in gate["message"]
    assert eventually(lambda: any(says in m for m in warnings(cluster, namespace, "Unschedulable")))
    assert pod_images(cluster, namespace, what) == []


def test_a_signature_carried_over_to_a_moved_tag_is_refused(
    cluster: Cluster, namespace: str, signed: Signed, image_policy: Any
) -> None:
    """Someone moves a signed tag to another image and copies the signature under the new
    digest's signature tag: the signature holds, for the old digest only."""
    path = f"{REPOSITORY}/manifests/"
    registry_request(path + signed.tags["moved"], put=registry_request(path + signed.tags["target"]))
    old_signature = registry_request(path + signature_tag(signed.digests["moved"]))
    registry_request(path + signature_tag(signed.digests["target"]), put=old_signature)  # carried over
    image_policy()
    run(cluster, namespace, "moved", signed.tags["moved"])
    gate = verified(cluster, namespace, "moved", "False")
    assert f"signed by team for {signed.digests['moved']}, not for {signed.digests['target']}" in gate["message"]
    assert "the tag moved after signing" in gate["message"]


def test_a_warn_policy_lets_an_unsigned_image_run_and_says_so(
    cluster: Cluster, namespace: str, signed: Signed, image_policy: Any
) -> None:
    image_policy(mode="Warn")
    run(cluster, namespace, "warned", signed.tags["unsigned"])
    gate = verified(cluster, namespace, "warned", "True")
    assert gate["reason"] == "Warned"
    assert "no cosign signature" in gate["message"]
    assert eventually(lambda: pod_images(cluster, namespace, "warned")) == [
        f"{REPOSITORY}@{signed.digests['unsigned']}"
    ]
    assert eventually(lambda: warnings(cluster, namespace, "ImageNotVerified"))


def test_a_registry_that_does_not_answer_holds_the_run_until_it_does(
    cluster: Cluster, namespace: str, signed: Signed, image_policy: Any
) -> None:
    image_policy()
    cluster_tool.stop_processes(cluster_tool.RUN_DIR, ["registry"])
    try:
        run(cluster, namespace, "later", signed.tags["later"])
        gate = verified(cluster, namespace, "later", "False")
        assert gate["reason"] == "RegistryUnavailable"
        assert gate["message"].startswith(f"image trainer-operator-verify-check:{signed.tags['later']}: ")
        assert "did not answer" in gate["message"]
        assert pod_images(cluster, namespace, "later") == []
    finally:
        registry.start(cluster_tool.RUN_DIR)
    verified(cluster, namespace, "later", "True")  # asked again with backoff (at most 30 s apart)
    assert eventually(lambda: pod_images(cluster, namespace, "later")) == [f"{REPOSITORY}@{signed.digests['later']}"]


def test_a_run_scaled_up_after_its_tag_moved_pulls_the_digest_it_was_let_through_with(
    cluster: Cluster, namespace: str, signed: Signed, image_policy: Any
) -> None:
    """One digest per image for the whole run: the tag moves to another image, signed by the same
    key, and the scale-up's new pods pull what the running ones run, not what the tag names now."""
    image_policy()
    run(cluster, namespace, "rolling", signed.tags["first"])
    verified(cluster, namespace, "rolling", "True")
    first = f"{REPOSITORY}@{signed.digests['first']}"
    assert eventually(lambda: pod_images(cluster, namespace, "rolling", "worker"), what="the first worker") == [first]
    path = f"{REPOSITORY}/manifests/"
    registry_request(path + signed.tags["first"], put=registry_request(path + signed.tags["second"]))
    moved = "sha256:" + hashlib.sha256(registry_request(path + signed.tags["first"])).hexdigest()
    assert moved == signed.digests["second"]  # the tag names the second image now
    cluster.kubectl("scale", "trainer", "rolling", "-n", namespace, "--replicas=3")

    def opened_for_the_scale_up() -> dict[str, Any]:
        found = condition(cluster.get("trainer", "rolling", namespace), "ImagesVerified")
        return found if found.get("status") == "True" and found.get("observedGeneration") == 2 else {}

    eventually(opened_for_the_scale_up, what="ImagesVerified True for generation 2")

    eventually(lambda: len(pod_images(cluster, namespace, "rolling", "worker")) == 3, what="three workers")
    every = pod_images(cluster, namespace, "rolling")
    assert every == [first] * len(every)  # the first worker, the new ones, and any other role's
    (check,) = cluster.get("trainer", "rolling", namespace)["status"]["verify"]["images"]
    assert check["digest"] == signed.digests["first"]


def test_a_policy_key_that_cannot_be_read_is_said_on_the_policy(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    pem = "-----BEGIN PUBLIC KEY-----\n" + "A" * 88 + "\n-----END PUBLIC KEY-----\n"
    cluster.apply(
        {
            "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
            "kind": "ImagePolicy",
            "metadata": {"name": "broken", "namespace": namespace},
            "spec": {"keys": [{"name": "garbled", "pem": pem}]},
        }
    )
    valid = eventually(lambda: condition(cluster.get("imagepolicy", "broken", namespace), "Valid"))
    assert (valid["status"], valid["reason"]) == ("False", "InvalidKey")
    assert "public key 'garbled' cannot be read" in valid["message"]
