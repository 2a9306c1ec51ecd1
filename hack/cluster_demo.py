#!/usr/bin/env python3
"""The main job on a cluster you already have (hack/demo.sh runs it when $KUBECONFIG is set):
nothing of the test bed assumed. It checks what the cluster has, installs the operator from its
image (deploy/overlays/dev rendered with TRAINER_OPERATOR_IMAGE, as a release's manifest is), runs
the seed Trainer sized to fit (CPU only, busybox as its training image, one epoch a few seconds)
through every controller to Succeeded, and shows what each controller reported.

    TRAINER_OPERATOR_IMAGE=ghcr.io/acme/trainer-operator:0.1.0 .venv/bin/python hack/cluster_demo.py
    .venv/bin/python hack/cluster_demo.py --uninstall   # the demo's namespace and the operator go

Checkpoints need shared storage: a ReadWriteMany StorageClass named by TRAINER_DEMO_STORAGE_CLASS
(the Trainer's checkpoint claim is made there), otherwise the run has none and the demo says so.
Uses the kubectl on PATH, pointed at the cluster by $KUBECONFIG.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hack.release

from hack import release
from testbed import versions
from trainerop_common.quantity import parse_quantity

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "trainer-demo"
SYSTEM = "trainer-operator-system"
NAME = "llama-7b-finetune"
SEED = REPO / "examples" / "seed" / "trainer.yaml"
POD_CPU, POD_MEMORY = "50m", "32Mi"  # what each of the demo's pods requests
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


def demo_trainer(checkpoint_claim: str | None) -> dict[str, Any]:
    """The seed Trainer (examples/seed/trainer.yaml) sized for any cluster: its topology, CPU-sized
    pods of busybox that run each of the seed's epochs in two seconds, and its checkpoint section
    only with a claim to write to."""
    trainer: dict[str, Any] = yaml.safe_load(SEED.read_text())
    spec = trainer["spec"]
    epochs = int(spec["epochs"])
    spec["image"] = "busybox:1.36"
    spec["command"] = [
        "sh",
        "-c",
        f'for e in $(seq {epochs}); do echo "rank $RANK: epoch $e of {epochs}"; sleep 2; done',
    ]
    spec["resources"] = {
        "requests": {"cpu": POD_CPU, "memory": POD_MEMORY},
        "limits": {"memory": POD_MEMORY},
    }
    user = {"spec": {"securityContext": {"runAsUser": 65532}}}  # busybox runs as root unless told
    spec["podTemplateOverrides"] = {"worker": user, "parameterServer": user}
    if checkpoint_claim:
        spec["checkpoint"]["bucket"] = checkpoint_claim
    else:
        del spec["checkpoint"]
    return trainer


def checkpoint_claim(storage_class: str | None) -> dict[str, Any] | None:
    """The Trainer's checkpoint claim in ``storage_class`` (ReadWriteMany: every replica mounts it)."""
    if not storage_class:
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "demo-checkpoints", "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


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


def run_trainer(storage_class: str | None) -> None:
    kubectl("apply", "-f", "-", stdin=kubectl("create", "namespace", NAMESPACE, "--dry-run=client", "-o", "yaml"))
    claim = checkpoint_claim(storage_class)
    if claim:
        kubectl("apply", "-f", "-", stdin=json.dumps(claim))
    else:
        print(
            "No checkpoints: they need a ReadWriteMany StorageClass (set TRAINER_DEMO_STORAGE_CLASS) or S3 "
            "(docs/checkpoints.md)",
            flush=True,
        )
    say(f"The seed Trainer, sized for this cluster, in namespace {NAMESPACE}")
    trainer = demo_trainer(claim["metadata"]["name"] if claim else None)
    kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(trainer))
    gates = ["QuotaAdmitted", "ImagesVerified", *(["CheckpointReady"] if claim else [])]
    for gate in gates:
        say(f"Waiting for {gate}")
        kubectl("wait", "-n", NAMESPACE, f"--for=condition={gate}", f"trainer/{NAME}", "--timeout=120s")
    say("Waiting for the run to succeed (its 10 epochs, 2 s each)")
    try:
        kubectl("wait", "-n", NAMESPACE, "--for=jsonpath={.status.phase}=Succeeded", f"trainer/{NAME}", "--timeout=5m")
    except DemoError as err:
        shown = kubectl("get", "trainer,pods", "-n", NAMESPACE, "-o", "wide")
        raise DemoError(f"{err}\n{shown}") from None


def show() -> None:
    for what in (["get", "trainers", "-o", "wide"], ["get", "pods", "-o", "wide"], ["get", "auditlogs"]):
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
        run_trainer(os.environ.get("TRAINER_DEMO_STORAGE_CLASS") or None)
        show()
        print(f"\nUninstall: .venv/bin/python hack/cluster_demo.py --uninstall (namespace {NAMESPACE}, the operator)")
        return 0
    except DemoError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
