"""Kill a worker of the real JAX example on the real node: how long until training resumes from the
last committed step, and where that time goes (issue 19: ≤ 30 s). Prints figures, not pass/fail.

Method: examples/jax/trainer.yaml as users apply it, run by the operator deployed in the cluster
(deploy/overlays/dev, as the e2e tests run it) on the real node (containerd, runc, a kubelet:
needs root). Once three epochs are committed, worker 1's training process gets SIGKILL (as the
OOM killer would send it); a watch of the pods records, in wall-clock time, when each step of the
recovery was seen; the restore is the time the replacement's own log line ("resuming from ...")
was written (kubectl logs --timestamps). The gang restart replaces every pod: each figure is the
last pod of the gang's, in seconds after the kill:

  detected   the kubelet reported the killed container terminated
  deleted    every pod of the old gang is gone
  created    every replacement exists        scheduled  every replacement has a node
  started    every replacement's container runs
  restored   every replacement logged that it resumed from the committed checkpoint

Usage: ``sudo python bench/jax_resume.py [--kills 3]`` (brings up the local cluster and the real
node unless KUBECONFIG is set, and takes them down again); writes bench/results/jax-resume.json
(--out)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod

from bench.measure import Watched, machine, spread
from bench.setup import operator_running
from testbed import containerd, deploy, images, localdev, node
from tests.e2e.test_training import RESUME_LINE, example, trainer
from tests.harness import Cluster, eventually

REPO = Path(__file__).resolve().parent.parent
STEPS = ("detected", "deleted", "created", "scheduled", "started", "restored")


class PodWatch:
    """Wall-clock times each pod (by uid) was first seen in each state."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.seen: dict[str, dict[str, float]] = {}
        self.names: dict[str, str] = {}
        self._watched = Watched(client, Pod, namespace, self._record)

    def _record(self, kind: str, pod: dict[str, Any]) -> None:
        now, meta = time.time(), pod["metadata"]
        states = self.seen.setdefault(meta["uid"], {"created": now})
        self.names[meta["uid"]] = meta["name"]
        containers = (pod.get("status") or {}).get("containerStatuses") or ()
        reached = {
            "deleted": kind == "DELETED",
            "scheduled": bool((pod.get("spec") or {}).get("nodeName")),
            "started": any((c.get("state") or {}).get("running") for c in containers),
            "detected": any((c.get("state") or {}).get("terminated") for c in containers),
        }
        for state, yes in reached.items():
            if yes:
                states.setdefault(state, now)

    def stop(self) -> None:
        self._watched.stop()


def restored_at(c: Cluster, namespace: str, pod: str) -> float | None:
    """When the pod's container logged that it resumed (wall clock), if it has."""
    try:
        log = c.kubectl("logs", "--timestamps", "-n", namespace, pod, "-c", "jax")
    except Exception:  # not started yet
        return None
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        if RESUME_LINE.search(text):
            return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def one_kill(c: Cluster, client: Client, namespace: str, name: str) -> dict[str, float]:
    c.apply(example(name), namespace)

    def committed() -> bool:
        status = trainer(c, namespace, name).get("status", {})
        return int(status.get("checkpoint", {}).get("latestStep") or 0) >= 96 and status.get("phase") == "Running"

    eventually(committed, timeout=300, what=f"{name}: three epochs' checkpoints to commit")
    watch = PodWatch(client, namespace)
    old = {p["metadata"]["uid"] for p in json.loads(c.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]}
    victim = c.get("pod", f"{name}-worker-1", namespace)
    container = victim["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    killed = time.time()
    containerd.ctr(containerd.node_dir(), "tasks", "kill", "--signal", "SIGKILL", container)

    def restored() -> dict[str, float] | None:
        new = {uid: s for uid, s in watch.seen.items() if uid not in old}
        if len(new) < 3 or not all("started" in s for s in new.values()):
            return None
        times = [restored_at(c, namespace, watch.names[uid]) for uid in new]
        if any(t is None for t in times):
            return None
        last = {step: max(s.get(step, killed) for s in new.values()) for step in ("created", "scheduled", "started")}
        return last | {"restored": max(t for t in times if t is not None)}

    gang = eventually(restored, timeout=300, what=f"{name}: every replacement to resume")
    watch.stop()
    victim_states = watch.seen.get(victim["metadata"]["uid"], {})
    figures = {
        "detected": victim_states.get("detected", killed),
        "deleted": max(watch.seen.get(uid, {}).get("deleted", killed) for uid in old),
    } | gang
    c.kubectl("delete", "trainer", name, "-n", namespace, "--wait=false")
    return {step: round(figures[step] - killed, 2) for step in STEPS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--kills", type=int, default=3, help="runs, one kill each")
    p.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "jax-resume.json", help="where the figures are written"
    )
    args = p.parse_args(argv)
    with operator_running() as c:
        if node.main(["up"]) != 0:
            raise SystemExit("the real node did not come up; see the message above")
        localdev.stop()
        try:
            if deploy.main(["up"]) != 0:
                raise SystemExit("the operator did not come up in the cluster; see the message above")
            images.load("jax-example", containerd.node_dir())
            client = Client(KubeConfig.from_file(str(c.kubeconfig)), field_manager="bench")
            ns = f"bench-jax-{uuid.uuid4().hex[:6]}"  # pods on the real node, with the S3 credentials
            c.apply({"apiVersion": "v1", "kind": "List", "items": [node.team_namespace(ns)]})
            c.apply(node.checkpoint_secret(ns), ns)
            runs = []
            for i in range(args.kills):
                print(f"== JAX kill {i + 1} of {args.kills}", file=sys.stderr, flush=True)
                runs.append(one_kill(c, client, ns, f"resume-{i}"))
                print(json.dumps(runs[-1]), flush=True)
            c.kubectl("delete", "namespace", ns, "--wait=false")
        finally:
            deploy.main(["down"])
            node.main(["down"])
    summary = {step: spread([r[step] for r in runs]) for step in STEPS}
    figures = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    text = json.dumps(figures | {"kills": runs, "summary": summary}, indent=1)
    args.out.write_text(text + "\n")
    print(text)
    print(f"written: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
