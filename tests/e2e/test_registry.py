"""The local cluster's registry (testbed/registry.py): an image pushed to it and never put on the
node any other way is pulled by the kubelet through it, by tag and by digest, over TLS; an image
it does not hold cannot be pulled (the upstream it mirrors is out of reach here)."""

import json
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from testbed import containerd, images, node
from tests.harness import Cluster, eventually


def pod(name: str, image: str) -> dict[str, Any]:
    """A pod on the real node whose image the kubelet pulls unless the node holds it."""
    container = {"name": "check", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", "echo"]}
    return node.pod_on_the_node(name, {**container, "securityContext": {"runAsUser": 65532, "runAsNonRoot": True}})


def ended(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj = cluster.get("pod", name, namespace)
    waiting = ((obj["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting") or {}
    done = obj["status"].get("phase") in ("Succeeded", "Failed") or "ImagePull" in waiting.get("reason", "")
    return obj if done else None


def test_the_kubelet_pulls_pushed_images_from_the_registry_by_tag_and_digest(
    cluster: Cluster, real_namespace: str, real_node: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:12]
    ref = f"docker.io/library/trainer-operator-registry-check:{tag}"
    context = tmp_path / "context"
    context.mkdir()
    images.build_image(ref, context, f'FROM {node.BUSYBOX_IMAGE}\nLABEL trainer-operator.check="{tag}"\n')
    digest = images.push(containerd.node_dir(), ref)  # pushed only: the node holds no copy
    by_digest = f"docker.io/library/trainer-operator-registry-check@{digest}"
    absent = f"docker.io/library/trainer-operator-registry-check:not-{tag}"
    for name, image in (("by-tag", ref), ("by-digest", by_digest), ("absent", absent)):
        cluster.apply(pod(name, image), real_namespace)

    for name in ("by-tag", "by-digest"):
        done = eventually(partial(ended, cluster, real_namespace, name), timeout=120, what=f"pod {name}")
        assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])
        # what ran is the pushed manifest
        assert done["status"]["containerStatuses"][0]["imageID"].endswith(digest)
    refused = eventually(lambda: ended(cluster, real_namespace, "absent"), timeout=120, what="pod absent")
    waiting = refused["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] in ("ErrImagePull", "ImagePullBackOff"), waiting
    # the mirror has no such tag; containerd then tries docker.io itself, which this machine cannot reach
    assert f'failed to pull and unpack image "{absent}"' in waiting.get("message", ""), waiting
