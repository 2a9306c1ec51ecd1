"""Verifying checkpoints on a PersistentVolumeClaim from a pod that mounts it (issue 5's PVC path).

The controller cannot read a claim; a short-lived verifier pod in the Trainer's namespace can. It
mounts the claim read-only at /checkpoints, runs the operator's own image
(``python -m trainerop_checkpoint.pvc``), reads each copy it is asked about, compares its sha256
and size with what the writer reported, and leaves one letter per copy in its termination message
(``o`` ok, ``m`` missing, ``x`` mismatch, ``u`` unreadable): 4096 bytes hold 4096 verdicts, so a
pod checks up to BATCH copies and a larger checkpoint gets several pods. The pod has no
ServiceAccount token, no privileges and a deadline. Pure except ``main``, which runs in the pod.

Not wired into the controller yet: the pod's lifecycle (create, read the verdicts, delete), its
RBAC and the end-to-end test on the real node are the next step.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from trainerop_common.checkpoint_storage import MOUNT, open_location

from .decide import Copy, Verdict, copy_verdict

BATCH = 500  # copies per pod: keeps the request (an env var) small and the message far under 4096
REQUEST_ENV = "TRAINEROP_VERIFY_REQUEST"
TERMINATION_LOG = "/dev/termination-log"
LETTERS: dict[Verdict, str] = {"ok": "o", "missing": "m", "mismatch": "x", "unreadable": "u"}
VERDICTS: dict[str, Verdict] = {letter: verdict for verdict, letter in LETTERS.items()}


def batches(copies: Sequence[Copy]) -> list[tuple[Copy, ...]]:
    return [tuple(copies[i : i + BATCH]) for i in range(0, len(copies), BATCH)]


def encode_request(copies: Iterable[Copy]) -> str:
    """What the pod checks: [path, key, sha256, size] per copy, in order."""
    return json.dumps([[c.path, c.key, c.sha256, c.size] for c in copies], separators=(",", ":"))


def pod_name(checkpoint: str, checkpoint_uid: str, batch: int) -> str:
    digest = hashlib.sha256(f"{checkpoint_uid}/{batch}".encode()).hexdigest()[:8]
    return f"{checkpoint[:40].rstrip('-.')}-verify-{digest}"


def verifier_pod(
    namespace: str,
    trainer: str,
    checkpoint: str,
    checkpoint_uid: str,
    claim: str,
    copies: Sequence[Copy],
    image: str,
    batch: int = 0,
) -> dict[str, Any]:
    """The pod that checks ``copies`` (one batch) on ``claim``, owned by the Checkpoint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(checkpoint, checkpoint_uid, batch),
            "namespace": namespace,
            "labels": {
                "trainer-name": trainer,
                "app.kubernetes.io/part-of": "trainer-operator",
                "app.kubernetes.io/component": "checkpoint-verifier",
            },
            "ownerReferences": [
                {
                    "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
                    "kind": "Checkpoint",
                    "name": checkpoint,
                    "uid": checkpoint_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "activeDeadlineSeconds": 600,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
            "containers": [
                {
                    "name": "verify",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-m", "trainerop_checkpoint.pvc"],
                    "env": [{"name": REQUEST_ENV, "value": encode_request(copies)}],
                    "volumeMounts": [{"name": "checkpoints", "mountPath": MOUNT, "readOnly": True}],
                    "terminationMessagePolicy": "File",
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def check(request: str) -> str:
    """In the pod: one verdict letter per requested copy (reads the mounted claim)."""
    letters = []
    for path, key, sha256, size in json.loads(request):
        try:
            found = open_location(path).sha256(key)
        except OSError:
            letters.append(LETTERS["unreadable"])
            continue
        letters.append(LETTERS[copy_verdict(found, sha256, size)])
    return "".join(letters)


def decode_verdicts(copies: Sequence[Copy], message: str | None) -> dict[tuple[str, str, str], Verdict]:
    """The pod's termination message as the controller's verdicts (keyed as it keys them). A
    message that does not match the request (truncated, another pod's) yields nothing."""
    text = (message or "").strip()
    if len(text) != len(copies) or any(letter not in VERDICTS for letter in text):
        return {}
    return {(c.uid, c.key, c.sha256): VERDICTS[letter] for c, letter in zip(copies, text, strict=True)}


def main(argv: list[str] | None = None) -> int:
    request = os.environ.get(REQUEST_ENV)
    if request is None:
        print(f"{REQUEST_ENV} is not set: this program runs in the checkpoint verifier pod", file=sys.stderr)
        return 2
    letters = check(request)
    with open(os.environ.get("TRAINEROP_TERMINATION_LOG", TERMINATION_LOG), "w") as log:
        log.write(letters)
    print(f"checked {len(letters)} copies: {letters.count('o')} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
