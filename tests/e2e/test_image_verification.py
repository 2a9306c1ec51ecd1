"""Signed images on the real node (docs/image-verification.md): the verify controller, a pod of the
operator's image in the cluster, reads the registry the node pulls through (testbed/deploy.py
points it there, as a platform team would), accepts the JAX example signed by the policy's key
with the real cosign, and the run trains from the digest that was checked; once a second policy
asks for another key too, the next run gets no pods."""

import json
from pathlib import Path
from typing import Any

from testbed import containerd, cosign, images, registry
from tests.e2e.test_training import example, finished, last_lines
from tests.harness import Cluster, condition, eventually

GOVERNED = "docker.io/library/trainer-operator-jax-example"


def image_policy(name: str, namespace: str, key: cosign.KeyPair) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "ImagePolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"images": [GOVERNED], "keys": [{"name": name, "pem": key.public.read_text()}]},
    }


def short_run(name: str) -> dict[str, Any]:
    manifest = example(name)
    spec = manifest["spec"]
    spec.pop("checkpoint")
    spec["epochs"] = 1
    spec["topology"] = {"workers": 2}
    spec["env"] = [{"name": "MIN_EPOCH_SECONDS", "value": "0"}]
    return manifest


def images_verified(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return condition(cluster.get("trainer", name, namespace), "ImagesVerified")


def test_a_signed_image_trains_from_its_digest_and_an_unsigned_one_gets_no_pods(
    cluster: Cluster, real_namespace: str, jax_image: str, tmp_path: Path
) -> None:
    digest = images.push(containerd.node_dir(), jax_image)  # its layers are there: the digest, at once
    team = cosign.key_pair(tmp_path, "team", "team-password")
    cosign.sign(team, f"{registry.mirror_path(GOVERNED)}@{digest}")
    cluster.apply(image_policy("team", real_namespace, team))
    cluster.apply(short_run("signed"), real_namespace)
    done = eventually(lambda: finished(cluster, real_namespace, "signed"), timeout=300, what="the run to finish")
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"]) + last_lines(
        cluster, real_namespace, "signed", workers=2
    )
    gate = images_verified(cluster, real_namespace, "signed")
    assert (gate["status"], gate["reason"]) == ("True", "Verified")
    assert f"{done['spec']['image']} ({digest[:19]}…) signed by team" in gate["message"]  # as the Trainer writes it
    pods = json.loads(cluster.kubectl("get", "pods", "-n", real_namespace, "-l", "trainer-name=signed", "-o", "json"))
    asked = {c["image"] for p in pods["items"] for c in p["spec"]["containers"]}
    assert asked == {f"{GOVERNED}@{digest}"}  # the pods name the digest that was checked
    statuses = [s for p in pods["items"] for s in p["status"]["containerStatuses"]]
    assert {s["imageID"].rsplit("@", 1)[-1] for s in statuses} == {digest}  # and ran it

    other = cosign.key_pair(tmp_path, "release", "")
    cluster.apply(image_policy("release", real_namespace, other))  # a second policy: its key signed nothing
    cluster.apply(short_run("unsigned"), real_namespace)
    refused = eventually(
        lambda: (c := images_verified(cluster, real_namespace, "unsigned")).get("status") == "False" and c,
        what="the second run refused",
    )
    assert refused["reason"] == "Unschedulable"
    assert "by none of the policy's keys (ImagePolicy 'release' (Enforce))" in refused["message"]
    assert cluster.kubectl("get", "pods", "-n", real_namespace, "-l", "trainer-name=unsigned", "-o", "name") == ""
