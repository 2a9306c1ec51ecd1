#!/usr/bin/env python3
"""The main job's training part: examples/jax/trainer.yaml on the local cluster's real node, with
a progress display, one worker killed mid-training and the run resuming from its checkpoint.

    python hack/train_demo.py                 # after testbed.cluster up and testbed.localdev start; needs root
    python hack/train_demo.py --no-kill       # just train

It brings up the real node (testbed/node.py) if it is not Ready, builds and imports the example's
image (testbed/images.py), makes a namespace whose pods run on the node with the S3 checkpoint
credentials, applies the example's Trainer (deleting one left by an earlier run) and follows it
until it succeeds: phase, epoch, global step, the latest committed checkpoint, restarts. With a
kill (the default), the training process of worker 1 is killed with SIGKILL after the given epoch;
the figures at the end say how long the gang took to come back and from which step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import cluster, containerd, images, node
from testbed.localdev import kubectl

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "jax" / "trainer.yaml"
NAME = "jax-spirals"
RESUMED = re.compile(r"resuming from \S+: global step (\d+)")
FIRST_STEP = re.compile(r"first step done")


def trainer(namespace: str) -> dict[str, Any]:
    return dict(json.loads(kubectl("get", "trainer", NAME, "-n", namespace, "-o", "json")))


def line(obj: dict[str, Any], epochs: int, elapsed: float) -> str:
    status = obj.get("status", {})
    progress, checkpoint = status.get("progress", {}), status.get("checkpoint", {})
    epoch = int(progress.get("epoch", 0))
    bar = "#" * epoch + "." * (epochs - epoch)
    restarts = sum(r.get("restarts", 0) for r in status.get("topology", {}).get("replicas", {}).values())
    latest = f"{checkpoint['latest']} ({checkpoint.get('committed', 0)} kept)" if checkpoint.get("latest") else "-"
    return (
        f"[{elapsed:6.1f}s] {status.get('phase', 'Pending'):<10} [{bar}] epoch {epoch:>2}/{epochs} "
        f"step {progress.get('step', 0):>4}  checkpoint {latest}  restarts {restarts}"
    )


def log_of(namespace: str, pod: str) -> str:
    try:
        return kubectl("logs", "-n", namespace, pod, "-c", "jax")
    except cluster.ClusterError:  # not started yet, or replaced meanwhile
        return ""


def kill_worker(namespace: str) -> None:
    pod = json.loads(kubectl("get", "pod", f"{NAME}-worker-1", "-n", namespace, "-o", "json"))
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    containerd.ctr(containerd.node_dir(), "tasks", "kill", "--signal", "SIGKILL", container)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", default="jax-demo")
    parser.add_argument("--kill-after-epoch", type=int, default=4, help="kill worker 1 after this epoch")
    parser.add_argument("--no-kill", action="store_true")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the run to finish")
    args = parser.parse_args(argv)
    os.environ.setdefault("KUBECONFIG", str(cluster.RUN_DIR / "admin.kubeconfig"))
    t0 = time.monotonic()
    try:
        if not node.node_ready(Path(os.environ["KUBECONFIG"])):
            cluster.say("bringing up the real node real-0 (testbed.node up)")
            if node.main(["up"]) != 0:
                return 1
        images.load("jax-example", containerd.node_dir())
        # Foreground: an earlier run's Checkpoints (same names) are gone before the new one saves.
        kubectl("delete", "trainer", NAME, "-n", args.namespace, "--ignore-not-found", "--cascade=foreground")
        manifests = [node.team_namespace(args.namespace), node.checkpoint_secret(args.namespace)]
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}))
        kubectl("apply", "-n", args.namespace, "-f", str(EXAMPLE))
        applied = time.monotonic()
        cluster.say(f"applied {EXAMPLE.relative_to(Path.cwd()) if EXAMPLE.is_relative_to(Path.cwd()) else EXAMPLE}")
        return follow(args, t0, applied)
    except cluster.ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def follow(args: argparse.Namespace, t0: float, applied: float) -> int:
    namespace = args.namespace
    shown, first_step, killed, resumed = "", None, None, None
    epochs = 0
    while time.monotonic() - applied < args.timeout:
        obj = trainer(namespace)
        epochs = int(obj["spec"]["epochs"])
        status = obj.get("status", {})
        now = time.monotonic()
        text = line(obj, epochs, now - applied)
        if text.split("] ", 1)[1] != shown:
            print(text, flush=True)
            shown = text.split("] ", 1)[1]
        log = log_of(namespace, f"{NAME}-worker-0") if first_step is None or (killed and not resumed) else ""
        if first_step is None and FIRST_STEP.search(log):
            first_step = now
            cluster.say(
                f"first training step {first_step - t0:.1f}s after the start ({first_step - applied:.1f}s after apply)"
            )
        progress_epoch = int(status.get("progress", {}).get("epoch", 0))
        if not args.no_kill and killed is None and progress_epoch >= args.kill_after_epoch:
            latest = status.get("checkpoint", {}).get("latestStep")
            kill_worker(namespace)
            killed = time.monotonic()
            cluster.say(f"killed the training process of {NAME}-worker-1 (SIGKILL); latest committed step {latest}")
        if killed and not resumed and (match := RESUMED.search(log)):
            resumed = time.monotonic()
            cluster.say(f"the gang resumed from global step {match[1]}, {resumed - killed:.1f}s after the kill")
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    else:
        what = f"kubectl describe trainer {NAME} -n {namespace}"
        print(f"error: the run did not finish within {args.timeout:.0f}s; see {what}", file=sys.stderr)
        return 1
    print(kubectl("get", "trainer", NAME, "-n", namespace))
    print(kubectl("get", "checkpoints", "-n", namespace, "-l", f"trainer-name={NAME}"))
    losses = re.findall(r"epoch (\d+)/\d+ step (\d+) loss ([0-9.]+)", log_of(namespace, f"{NAME}-worker-0"))
    if losses:
        print("loss by epoch (worker 0, since its last start): " + ", ".join(f"{e}: {v}" for e, _, v in losses))
    if status.get("phase") != "Succeeded":
        print(f"error: the run failed; see kubectl describe trainer {NAME} -n {namespace}", file=sys.stderr)
        return 1
    cluster.say(f"{NAME} succeeded {time.monotonic() - applied:.0f}s after apply")
    return 0


if __name__ == "__main__":
    sys.exit(main())
