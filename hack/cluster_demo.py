#!/usr/bin/env python3
"""The main job on a cluster you already have (hack/demo.sh runs it when $KUBECONFIG is set):
nothing of the test bed assumed. It checks what the cluster has, installs the operator from its
image (deploy/overlays/dev rendered with TRAINER_OPERATOR_IMAGE, as a release's manifest is), runs
the seed Trainer sized to fit (CPU only, the operator's image as its training image, each of its
epochs two seconds and a checkpoint) through every controller to Succeeded, and shows what each
controller reported.

    TRAINER_OPERATOR_IMAGE=ghcr.io/acme/trainer-operator:0.1.0 .venv/bin/python hack/cluster_demo.py
    .venv/bin/python hack/cluster_demo.py --uninstall   # the demo's namespace and the operator go

Checkpoints go to a ReadWriteMany claim in the StorageClass TRAINER_DEMO_STORAGE_CLASS names, or
else to an S3 server the demo starts in its namespace (hack/demo_storage.py: SeaweedFS's image,
or TRAINER_DEMO_S3_IMAGE for a mirror of it). Uses the kubectl on PATH, pointed at the cluster by
$KUBECONFIG.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hack.release

from hack import demo_storage, release
from hack.demo_storage import Storage
from testbed import versions
from trainerop_common.quantity import parse_quantity

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "trainer-demo"
SYSTEM = "trainer-operator-system"
NAME = "llama-7b-finetune"
SEED = REPO / "examples" / "seed" / "trainer.yaml"
POD_CPU, POD_MEMORY = "50m", "128Mi"  # what each of the demo's pods requests
RENDERED = REPO / ".demo" / "trainer-operator.yaml"  # for --uninstall


class DemoError(Exception):
    """What the cluster lacks, or what failed, and what to do about it."""


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def kubectl(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def version_problem(server: dict[str, Any]) -> str | None:
    """Why a server of this `kubectl version -o json` serverVersion cannot run the operator."""
    minor = int(re.sub(r"\D.*", "", str(server.get("minor", "0"))) or 0)
    if (int(server.get("major", 0)), minor) < versions.MINIMUM_MINOR:
        return f"the cluster runs Kubernetes {server.get('gitVersion')}; the operator needs {versions.MINIMUM} or newer"
    return None


def runs_pods(node: dict[str, Any]) -> bool:
    """Ready, schedulable, no taint that keeps pods away, and room for one of the demo's pods."""
    spec, status = node.get("spec", {}), node.get("status", {})
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints", []))
    room = status.get("allocatable", {})
    fits = all(
        parse_quantity(room.get(resource, "0")) >= parse_quantity(need)
        for resource, need in (("cpu", POD_CPU), ("memory", POD_MEMORY))
    )
    return ready and not spec.get("unschedulable") and not tainted and fits


TRAIN = """
import os, time
epochs = int(os.environ["EPOCHS"])
who = f"{os.environ['REPLICA_TYPE']} {os.environ['REPLICA_INDEX']}"
checkpointer = None
if "CHECKPOINT_SHARD" in os.environ:  # the replicas that write a shard of each checkpoint
    from trainerop_sdk.checkpoint import Checkpointer
    checkpointer = Checkpointer.in_cluster()
for epoch in range(1, epochs + 1):
    time.sleep(2)
    print(f"{who}: epoch {epoch} of {epochs}", flush=True)
    if checkpointer:
        checkpointer.save(f"{who} after epoch {epoch}".encode(), step=100 * epoch, epoch=epoch)
"""


def demo_trainer(image: str, checkpoint: dict[str, str]) -> dict[str, Any]:
    """The seed Trainer (examples/seed/trainer.yaml) sized for any cluster: its topology, in
    CPU-sized pods of the operator's ``image`` (Python and trainerop_sdk) that run each of the
    seed's epochs in two seconds and save a checkpoint after each, to ``checkpoint``'s bucket."""
    trainer: dict[str, Any] = yaml.safe_load(SEED.read_text())
    spec = trainer["spec"]
    spec["image"] = image
    spec["command"] = ["python", "-c", TRAIN]
    spec["resources"] = {
        "requests": {"cpu": POD_CPU, "memory": POD_MEMORY},
        "limits": {"memory": POD_MEMORY},
    }
    spec["checkpoint"] |= checkpoint
    return trainer


def storage(storage_class: str | None, s3_image: str) -> Storage:
    """The claim in ``storage_class``, else an S3 server of the demo's own, with the key an earlier
    run made (its server still has it) or a new one."""
    if storage_class:
        return demo_storage.claim_storage(NAMESPACE, storage_class)
    try:
        field = "jsonpath={.data.AWS_SECRET_ACCESS_KEY}"
        stored = kubectl("get", "secret", demo_storage.CREDENTIALS, "-n", NAMESPACE, "-o", field)
        key = base64.b64decode(stored).decode()
    except DemoError:  # none yet
        key = ""
    return demo_storage.s3_storage(NAMESPACE, s3_image, key or secrets.token_hex(20))


def check_cluster() -> None:
    say("What the cluster has")
    problem = version_problem(json.loads(kubectl("version", "-o", "json"))["serverVersion"])
    if problem:
        raise DemoError(problem)
    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    usable = [n["metadata"]["name"] for n in nodes if runs_pods(n)]
    if not usable:
        raise DemoError(
            f"none of the {len(nodes)} nodes runs the demo's pods (Ready, schedulable, untainted, "
            f"{POD_CPU} CPU and {POD_MEMORY} memory allocatable): add such a node, then run again"
        )
    print(f"Kubernetes {versions.MINIMUM} or newer; nodes that run the demo's pods: {', '.join(usable)}", flush=True)


def install(image: str) -> None:
    say(f"Installing the operator (deploy/overlays/dev) with its image {image}")
    rendered = release.render("dev", image, kubectl="kubectl")
    RENDERED.parent.mkdir(exist_ok=True)
    RENDERED.write_text(rendered)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(RENDERED))
    say("Waiting for the seven controllers (kubectl wait ... --timeout=5m)")
    try:
        kubectl("wait", "--for=condition=Available", "deployment", "--all", "-n", SYSTEM, "--timeout=5m")
    except DemoError as err:
        pods = kubectl("get", "pods", "-n", SYSTEM)
        raise DemoError(f"{err}\n{pods}\nCan the nodes pull {image}? kubectl describe pod -n {SYSTEM}") from None


def prepare_storage(chosen: Storage) -> None:
    for obj in chosen.objects:  # server-side: no copy of a Secret's data in an annotation
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(obj))
    if chosen.s3_image is None:
        print(f"Checkpoints to the claim {chosen.checkpoint['bucket']}", flush=True)
        return
    say(f"An S3 server for the checkpoints in namespace {NAMESPACE} (kubectl rollout status ... --timeout=3m)")
    try:
        kubectl("rollout", "status", f"deployment/{demo_storage.S3_NAME}", "-n", NAMESPACE, "--timeout=3m")
    except DemoError as err:
        pods = kubectl("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={demo_storage.S3_NAME}")
        raise DemoError(
            f"{err}\n{pods}\nCan the nodes pull {chosen.s3_image}? "
            "Set TRAINER_DEMO_S3_IMAGE to a mirror of it, or TRAINER_DEMO_STORAGE_CLASS to a ReadWriteMany StorageClass"
        ) from None
    wait_for_bucket()
    print(
        f"Checkpoints to {chosen.checkpoint['bucket']} on {demo_storage.S3_NAME} (SeaweedFS, for the demo only: "
        "its data goes with its pod; its ports other than S3's take no key and are closed only where the cluster "
        "enforces NetworkPolicies)",
        flush=True,
    )


def wait_for_bucket(tries: int = 30) -> None:
    """Until SeaweedFS lists the bucket it makes at start (a second or two after its S3 port opens)."""
    command, stdin = demo_storage.list_buckets_command()
    for _ in range(tries):
        listed = kubectl(
            "exec", "-i", "-n", NAMESPACE, f"deployment/{demo_storage.S3_NAME}", "--", *command, stdin=stdin
        )
        if demo_storage.has_bucket(listed):
            return
        time.sleep(2)
    raise DemoError(
        f"{demo_storage.S3_NAME} did not make its bucket {demo_storage.BUCKET}: "
        f"kubectl logs -n {NAMESPACE} deployment/{demo_storage.S3_NAME} says why"
    )


def run_trainer(image: str, chosen: Storage) -> None:
    kubectl("apply", "-f", "-", stdin=kubectl("create", "namespace", NAMESPACE, "--dry-run=client", "-o", "yaml"))
    prepare_storage(chosen)
    say(f"The seed Trainer, sized for this cluster, in namespace {NAMESPACE}")
    kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(demo_trainer(image, chosen.checkpoint)))
    for gate in ("QuotaAdmitted", "ImagesVerified", "CheckpointReady"):
        say(f"Waiting for {gate}")
        kubectl("wait", "-n", NAMESPACE, f"--for=condition={gate}", f"trainer/{NAME}", "--timeout=120s")
    say("Waiting for the run to succeed (its 10 epochs, 2 s each)")
    try:
        kubectl("wait", "-n", NAMESPACE, "--for=jsonpath={.status.phase}=Succeeded", f"trainer/{NAME}", "--timeout=5m")
    except DemoError as err:
        shown = kubectl("get", "trainer,pods", "-n", NAMESPACE, "-o", "wide")
        raise DemoError(f"{err}\n{shown}") from None


def show() -> None:
    wide = ["-o", "wide"]
    for what in (["get", "trainers", *wide], ["get", "pods", *wide], ["get", "checkpoints"], ["get", "auditlogs"]):
        say("kubectl " + " ".join(what))
        print(kubectl(*what, "-n", NAMESPACE), flush=True)
    say(f"Each controller's section of trainer/{NAME}'s status")
    status = json.loads(kubectl("get", "trainer", NAME, "-n", NAMESPACE, "-o", "json"))["status"]
    for section in ("quota", "verify", "audit", "checkpoint", "topology"):
        if section in status:
            print(f"  {section}: {json.dumps(status[section])[:200]}", flush=True)


def uninstall() -> None:
    say(f"Deleting namespace {NAMESPACE} and the operator")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
    if RENDERED.exists():
        kubectl("delete", "--ignore-not-found", "-f", str(RENDERED))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--uninstall", action="store_true", help="delete the demo's namespace and the operator")
    args = parser.parse_args(argv)
    try:
        if not shutil.which("kubectl"):
            needed = f"{versions.MINIMUM} or newer"
            raise DemoError(f"kubectl is not on PATH: install it ({needed}) and point $KUBECONFIG at the cluster")
        if args.uninstall:
            uninstall()
            return 0
        image = os.environ.get("TRAINER_OPERATOR_IMAGE")
        if not image:
            raise DemoError(
                "set TRAINER_OPERATOR_IMAGE to the operator's image your nodes can pull: a release's "
                "<registry>/trainer-operator:<version>, or deploy/Dockerfile built and pushed (docs/release.md)"
            )
        check_cluster()
        install(image)
        s3_image = os.environ.get("TRAINER_DEMO_S3_IMAGE") or demo_storage.S3_IMAGE
        run_trainer(image, storage(os.environ.get("TRAINER_DEMO_STORAGE_CLASS") or None, s3_image))
        show()
        print(f"\nUninstall: .venv/bin/python hack/cluster_demo.py --uninstall (namespace {NAMESPACE}, the operator)")
        return 0
    except DemoError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
