#!/usr/bin/env python3
"""The main job's Kubeflow part: upstream's own PyTorchJob and TFJob examples on the real node,
served by the kubeflow controller, with only their image changed (and upstream's GPU limit
dropped: no GPU here).

    python hack/kubeflow_demo.py        # after the operator runs in the cluster (testbed.deploy up); needs root

It builds and imports examples/pytorch's and examples/tensorflow's images (testbed/images.py,
cached by content), reads the examples from the upstream module's source (bench/kubeflow.py's
version), makes a namespace whose pods run on the node with the claim the TFJob mounts, applies
both jobs (deleting ones left by an earlier run) and follows them until they end, printing each
job's state as it changes; then `kubectl get pytorchjobs,tfjobs`, the pods, and the loss lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import kubeflow as upstream
from testbed import cluster, containerd, images, node
from testbed.localdev import kubectl

JOBS = (  # (kind, the upstream example, image, its training container)
    ("pytorchjob", upstream.PYTORCH_EXAMPLE, "pytorch-example", "pytorch"),
    ("tfjob", upstream.TENSORFLOW_EXAMPLE, "tensorflow-example", "tensorflow"),
)


def state(kind: str, name: str, namespace: str) -> str:
    """The job's newest condition, as `kubectl get` shows it (Created, Running, Succeeded...)."""
    obj = json.loads(kubectl("get", kind, name, "-n", namespace, "-o", "json"))
    conditions = obj.get("status", {}).get("conditions") or [{"type": "Pending"}]
    return str(conditions[-1]["type"])


def apply_jobs(namespace: str) -> list[tuple[str, str, str]]:
    """Apply each example; returns (kind, name, container) of each."""
    applied = []
    for kind, example, image, container in JOBS:
        job: dict[str, Any] = upstream.upstream_example(example, images.IMAGES[image].ref)
        name = job["metadata"]["name"]
        kubectl("delete", kind, name, "-n", namespace, "--ignore-not-found", "--cascade=foreground")
        kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
        cluster.say(f"applied upstream's {example} as {kind}/{name} (image {images.IMAGES[image].ref})")
        applied.append((kind, name, container))
    return applied


def follow(jobs: list[tuple[str, str, str]], namespace: str, timeout: float) -> dict[str, str]:
    """Print each job's state as it changes until every one has ended; returns name -> state."""
    start, shown = time.monotonic(), dict[str, str]()
    while time.monotonic() - start < timeout:
        now = {name: state(kind, name, namespace) for kind, name, _ in jobs}
        for name, text in now.items():
            if shown.get(name) != text:
                print(f"[{time.monotonic() - start:6.1f}s] {name}: {text}", flush=True)
        shown = now
        if all(s in ("Succeeded", "Failed") for s in now.values()):
            return now
        time.sleep(1)
    raise cluster.ClusterError(
        f"the jobs did not end within {timeout:.0f}s; see kubectl describe pytorchjobs,tfjobs -n {namespace}"
    )


def losses(namespace: str, pod: str, container: str) -> str:
    """The pod's first and last loss (epoch or batch, loss) as its log says."""
    log = kubectl("logs", "-n", namespace, pod, "-c", container)
    found = upstream.TORCH_LOSS.findall(log) or upstream.KERAS_LOSS.findall(log)
    if not found:
        return f"{pod}: no loss lines; see kubectl logs -n {namespace} {pod} -c {container}"
    return f"{pod}: loss {found[0][1]} (epoch {found[0][0]}) -> {found[-1][1]} (epoch {found[-1][0]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", default="kubeflow-demo")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the jobs to end")
    args = parser.parse_args(argv)
    os.environ.setdefault("KUBECONFIG", str(cluster.RUN_DIR / "admin.kubeconfig"))
    try:
        for _, _, image, _ in JOBS:
            images.load(image, containerd.node_dir())
        volume, _ = cluster.node_volume(args.namespace, "strategy-volume")  # the TFJob's claim
        items = [node.team_namespace(args.namespace), *volume]
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        jobs = apply_jobs(args.namespace)
        ended = follow(jobs, args.namespace, args.timeout)
        print(kubectl("get", "pytorchjobs,tfjobs", "-n", args.namespace))
        print(kubectl("get", "pods", "-n", args.namespace, "-o", "wide"))
        for _, name, container in jobs:
            print(losses(args.namespace, f"{name}-worker-0", container))
    except cluster.ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    failed = [name for name, s in ended.items() if s != "Succeeded"]
    if failed:
        print(f"error: {', '.join(failed)} failed; see kubectl describe pytorchjobs,tfjobs -n {args.namespace}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
