"""Checkpoints on a PersistentVolumeClaim on the real node: the verifier pod (the operator's image,
the claim mounted read-only) reports each copy in its termination message, and a real training
run's checkpoints on the seed's claim pvc-backups are committed from those verdicts and the old
ones deleted by collector pods (trainerop_checkpoint.pvc_pods, with the operator in the cluster)."""

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import containerd, images
from tests.e2e.test_training import checkpoint_phases, example, finished
from tests.e2e.volumes import node_volume
from tests.harness import Cluster, eventually
from trainerop_checkpoint import pvc_pods as pvc
from trainerop_checkpoint.decide import Copy
from trainerop_sdk.layout import checkpoint_path, copy_key
from trainerop_sdk.storage import LocalLocation


@pytest.fixture
def claim(cluster: Cluster, real_namespace: str) -> Iterator[Path]:
    """The seed's claim pvc-backups, backed by a directory on the node (the local cluster has no
    provisioner); yields that directory."""
    with node_volume(cluster, real_namespace, "pvc-backups") as root:
        yield root


def test_a_verifier_pod_reads_the_claim_and_reports_each_copy(
    cluster: Cluster, real_namespace: str, claim: Path
) -> None:
    images.load("controllers", containerd.node_dir())
    # The claim's directory on the node, written as training pods write through the SDK.
    in_pod = checkpoint_path("/checkpoints/llama", 300)
    on_host = LocalLocation(checkpoint_path(str(claim / "llama"), 300))
    copies = []
    for shard in (0, 1):
        blob = f"weights of shard {shard}".encode()
        for r in range(3):
            on_host.put(copy_key(shard, r), blob)
            copies.append(
                Copy("llama-step-300", "uid", in_pod, copy_key(shard, r), hashlib.sha256(blob).hexdigest(), len(blob))
            )
    # Readable by the verifier's uid (65532) whatever this test process's umask is.
    for path in claim.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (claim / "llama" / "step-0000000300" / copy_key(0, 1)).write_bytes(b"bit rot")
    (claim / "llama" / "step-0000000300" / copy_key(1, 2)).unlink()

    target = pvc.Target(real_namespace, "llama", "pvc-backups", "trainer-operator:dev")
    pod = pvc.verifier_pod(target, "llama-step-300", "uid", copies)
    # No Checkpoint object or Trainer here: the pod goes unowned, left alone by the controller.
    status = run_alone(cluster, real_namespace, pod, "the verifier pod to finish")
    # good, bit rot, good; good, good, deleted
    assert status["containerStatuses"][0]["state"]["terminated"]["message"] == "oxooom"


def run_alone(cluster: Cluster, namespace: str, pod: dict[str, Any], what: str) -> dict[str, Any]:
    """A storage pod the checkpoint controller leaves alone (no owner, no Trainer label), until it ends."""
    pod["metadata"].pop("ownerReferences")
    pod["metadata"]["labels"].pop(pvc.TRAINER_LABEL)
    cluster.apply(pod, namespace)

    def ended() -> dict[str, Any] | None:
        status = cluster.get("pod", pod["metadata"]["name"], namespace)["status"]
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = eventually(ended, timeout=180, what=what)
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    return status


def owned_by(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)


def test_a_collector_pod_deletes_as_the_writer_and_follows_no_symlink(
    cluster: Cluster, real_namespace: str, claim: Path
) -> None:
    """The collector runs as the training pods' user (1000, the examples' images), without
    capabilities: it deletes what that user wrote, and a symlink another tenant planted as a
    checkpoint, or inside one, leads it nowhere."""
    images.load("controllers", containerd.node_dir())
    victim = claim / "victim" / "step-0000000001"
    LocalLocation(str(victim)).put(copy_key(0, 0), b"another tenant's weights")
    ours = claim / "llama" / "step-0000000300"
    LocalLocation(str(ours)).put(copy_key(0, 0), b"weights")
    (ours / "out").symlink_to(claim / "victim")  # inside: unlinked, not followed
    (claim / "llama" / "step-0000000400").symlink_to(victim)  # as the checkpoint: an error
    owned_by(claim / "llama", 1000)

    target = pvc.Target(real_namespace, "llama", "pvc-backups", "trainer-operator:dev")
    paths = [checkpoint_path("/checkpoints/llama", 300), checkpoint_path("/checkpoints/llama", 400)]
    pod = pvc.collector_pod(target, "uid", paths, pvc.Writer(1000, 1000))
    status = run_alone(cluster, real_namespace, pod, "the collector pod to finish")
    assert status["containerStatuses"][0]["state"]["terminated"]["message"] == "de"
    assert not ours.exists()
    assert (claim / "llama" / "step-0000000400").is_symlink()
    assert (victim / copy_key(0, 0)).read_bytes() == b"another tenant's weights"


def storage_pods(cluster: Cluster, namespace: str) -> list[str]:
    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", pvc.PURPOSE_LABEL, "-o", "name")
    return out.split()


def test_training_checkpoints_on_a_claim_commit_and_the_old_ones_are_deleted(
    cluster: Cluster, real_namespace: str, claim: Path, jax_image: str
) -> None:
    manifest = example("spirals-pvc")
    spec = manifest["spec"]
    spec["epochs"] = 4
    spec["checkpoint"] = {"bucket": "pvc-backups", "intervalMinutes": 1, "maxRetention": 2}
    cluster.apply(manifest, real_namespace)
    done = eventually(lambda: finished(cluster, real_namespace, "spirals-pvc"), timeout=600, what="the run to finish")
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"], indent=1)

    # A checkpoint per epoch (32 steps), each verified by a pod reading the claim; the newest 2 kept.
    want = {32: "GarbageCollected", 64: "GarbageCollected", 96: "Committed", 128: "Committed"}
    eventually(
        lambda: checkpoint_phases(cluster, real_namespace, "spirals-pvc") == want,
        timeout=120,
        what=f"checkpoints {want}",
    )
    latest = cluster.get("checkpoint", "spirals-pvc-step-128", real_namespace)["status"]
    assert (latest["reason"], latest["verifiedShards"], latest["committedReplicas"]) == ("Quorum", 3, 3)
    trainer = cluster.get("trainer", "spirals-pvc", real_namespace)["status"]["checkpoint"]
    assert trainer["latest"] == "spirals-pvc-step-128"
    assert trainer["resumeFrom"] == "/checkpoints/spirals-pvc/step-0000000128"

    # On the claim: the collected checkpoints' data is gone, the kept ones are whole.
    steps = claim / "spirals-pvc"
    eventually(
        lambda: sorted(p.name for p in steps.iterdir()) == ["step-0000000096", "step-0000000128"],
        what="the collected checkpoints' directories to go",
    )
    assert len(list((steps / "step-0000000128").rglob("copy-*"))) == 9  # 3 shards x 3 copies
    # Every verifier and collector pod is gone once its answer is in.
    eventually(lambda: storage_pods(cluster, real_namespace) == [], what="the storage pods to go")
    events = json.loads(cluster.kubectl("get", "events", "-n", real_namespace, "-o", "json"))["items"]
    assert not [e["message"] for e in events if e["reason"] in ("StoragePodFailed", "CheckpointDataLeft")]
