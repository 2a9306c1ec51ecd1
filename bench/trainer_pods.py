#!/usr/bin/env python3
"""How fast the trainer controller replaces failed pods and creates pods for many Trainers.

    python bench/trainer_pods.py --failures 50 --trainers 100

Figures (printed, not asserted):
- replacement_seconds p50/p99/max: from a worker's failure (its status reports exit code 137, as
  its node would) to the creation of its replacement under the same name, seen on a watch. The
  failures come one after another, so the controllers run with --restart-backoff-seconds 0: the
  figure is the controller's reaction, not the deliberate backoff;
- all_pods_seconds: from applying N two-worker Trainers at once to the last of their pods existing.
Runs against $KUBECONFIG, else starts the local cluster (and stops it afterwards).
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bench.setup import operator_running, percentile, scratch_namespace
from tests.harness import Cluster, eventually

Seen = tuple[float, str, str, str, str]  # (time, event type, name, uid, phase)


def watch_pods(client: Client, namespace: str, out: queue.Queue[Seen], stop: threading.Event) -> None:
    for kind, pod in client.watch(Pod, namespace=namespace):
        now = time.monotonic()
        meta = pod.metadata
        assert meta is not None
        assert meta.name is not None
        phase = pod.status.phase if pod.status and pod.status.phase else ""
        out.put((now, kind, meta.name, meta.uid or "", phase))
        if stop.is_set():
            return


def trainer(name: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "metadata": {"name": name},
        "spec": {
            "epochs": 1,
            "image": "bench:latest",
            "topology": {"workers": workers},
            "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 1000},
        },
    }


def exit_with(client: Client, namespace: str, name: str, code: int) -> None:
    """A pod's container ends with ``code`` (137: OOM-killed), as its node would report it."""
    status = {
        "status": {
            "phase": "Failed" if code else "Succeeded",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "image": "bench:latest",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "reason": "OOMKilled" if code == 137 else "Completed"}},
                }
            ],
        }
    }
    client.patch(Pod.Status, name, status, namespace=namespace, patch_type=PatchType.MERGE)


def fail(client: Client, namespace: str, name: str) -> None:
    exit_with(client, namespace, name, 137)


def replacement_latency(c: Cluster, client: Client, namespace: str, failures: int) -> list[float]:
    workers = 10
    c.apply(trainer("recovery", workers), namespace)

    def all_running() -> bool:
        pods = json.loads(c.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(live) == workers and all(p["status"].get("phase") == "Running" for p in live)

    eventually(all_running, timeout=120, what="10 running workers")
    events: queue.Queue[Seen] = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=watch_pods, args=(client, namespace, events, stop), daemon=True).start()
    time.sleep(1)  # let the watch start before the first failure (a measurement aid, not correctness)
    latencies = []
    for i in range(failures):
        victim = f"recovery-worker-{i % workers}"
        old_uid = client.get(Pod, victim, namespace=namespace).metadata.uid
        t0 = time.monotonic()
        fail(client, namespace, victim)
        created = running = None
        deadline = t0 + 60
        while (created is None or running is None) and time.monotonic() < deadline:
            try:
                at, _kind, name, uid, phase = events.get(timeout=1)
            except queue.Empty:
                continue
            if name == victim and uid != old_uid:
                created = created or at
                running = at if phase == "Running" else None
        if created is None:
            raise SystemExit(f"{victim} was not replaced within 60 s")
        latencies.append(created - t0)
        print(f"failure {i + 1}/{failures}: replaced in {created - t0:.3f}s", file=sys.stderr)
    stop.set()
    return latencies


def many_trainers(c: Cluster, client: Client, namespace: str, count: int) -> float:
    events: queue.Queue[Seen] = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=watch_pods, args=(client, namespace, events, stop), daemon=True).start()
    time.sleep(1)
    items = [trainer(f"many-{i}", 2) for i in range(count)]
    t0 = time.monotonic()
    c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)
    names: set[str] = set()
    last = t0
    while len(names) < 2 * count:
        try:
            at, kind, name, _, _ = events.get(timeout=120)
        except queue.Empty:
            raise SystemExit(f"only {len(names)} of {2 * count} pods after 120 s without progress") from None
        if kind == "ADDED" and name not in names:
            names.add(name)
            last = at
    stop.set()
    return last - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--failures", type=int, default=50)
    parser.add_argument("--trainers", type=int, default=100)
    args = parser.parse_args()
    with operator_running(extra_env={"TRAINEROP_RESTART_BACKOFF_SECONDS": "0"}) as c:
        client = Client(KubeConfig.from_file(str(c.kubeconfig)))
        if args.failures:
            with scratch_namespace(c, "bench-recovery") as namespace:
                latencies = replacement_latency(c, client, namespace, args.failures)
            print(f"failures {len(latencies)}")
            for q in (50, 99):
                print(f"replacement_seconds_p{q} {percentile(latencies, q):.3f}")
            print(f"replacement_seconds_max {max(latencies):.3f}")
        if args.trainers:
            with scratch_namespace(c, "bench-many") as namespace:
                elapsed = many_trainers(c, client, namespace, args.trainers)
            print(f"trainers {args.trainers}")
            print(f"all_pods_seconds {elapsed:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
