"""The PVC checkpoint verifier in a real pod on the real node: the operator's image, the claim
mounted read-only, the verdicts in the pod's termination message (trainerop_checkpoint.pvc)."""

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from hack import cluster as cluster_tool
from hack import images, node

from tests.harness import Cluster, eventually
from trainerop_checkpoint import pvc
from trainerop_checkpoint.decide import Copy
from trainerop_sdk.layout import checkpoint_path, copy_key
from trainerop_sdk.storage import LocalLocation


def test_a_verifier_pod_reads_the_claim_and_reports_each_copy(
    cluster: Cluster, real_namespace: str, real_node: str
) -> None:
    images.load("controllers", node.node_dir())
    volume, claim = cluster_tool.checkpoint_volume(real_namespace)
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": [volume, claim]})
    try:
        verify_on_the_claim(cluster, real_namespace, volume, claim)
    finally:
        cluster.kubectl("delete", "persistentvolume", volume["metadata"]["name"], "--wait=false")
        shutil.rmtree(volume["spec"]["hostPath"]["path"], ignore_errors=True)


def verify_on_the_claim(cluster: Cluster, real_namespace: str, volume: dict[str, Any], claim: dict[str, Any]) -> None:
    # The claim's directory on the node, written as training pods write through the SDK.
    host_root = Path(volume["spec"]["hostPath"]["path"])
    in_pod = checkpoint_path("/checkpoints/llama", 300)
    on_host = LocalLocation(checkpoint_path(str(host_root / "llama"), 300))
    copies = []
    for shard in (0, 1):
        blob = f"weights of shard {shard}".encode()
        for r in range(3):
            on_host.put(copy_key(shard, r), blob)
            copies.append(
                Copy("llama-step-300", "uid", in_pod, copy_key(shard, r), hashlib.sha256(blob).hexdigest(), len(blob))
            )
    # Readable by the verifier's uid (65532) whatever this test process's umask is.
    for directory in [host_root, *host_root.rglob("*")]:
        directory.chmod(0o755 if directory.is_dir() else 0o644)
    (host_root / "llama" / "step-0000000300" / copy_key(0, 1)).write_bytes(b"bit rot")
    (host_root / "llama" / "step-0000000300" / copy_key(1, 2)).unlink()

    pod = pvc.verifier_pod(
        real_namespace, "llama", "llama-step-300", "uid", claim["metadata"]["name"], copies, "trainer-operator:dev"
    )
    pod["metadata"].pop("ownerReferences")  # no Checkpoint object here: the garbage collector would take the pod
    cluster.apply(pod, real_namespace)

    def finished() -> dict[str, Any] | None:
        status = cluster.get("pod", pod["metadata"]["name"], real_namespace)["status"]
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = eventually(finished, timeout=180, what="the verifier pod to finish")
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    message = status["containerStatuses"][0]["state"]["terminated"]["message"]
    verdicts = pvc.decode_verdicts(copies, message)
    assert [verdicts[(c.uid, c.key, c.sha256)] for c in copies] == ["ok", "mismatch", "ok", "ok", "ok", "missing"]
