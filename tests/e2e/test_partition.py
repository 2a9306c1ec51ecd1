"""A node that stops answering while its containers go on (issue 20): the kubelet of the real node
killed, so the node turns NotReady with the rank's container still running under containerd, as
in a network partition. The trainer must not replace the pod under the same name while it may
still run: it deletes it and waits for the node (docs/failure-modes.md). Here no other node takes
the run's pods (the kwok nodes' taint), so the quota controller also withdraws its admission and
queues it until the node is back. When the kubelet comes back it stops the old container, confirms
the deletion, and only then does the replacement start: at no moment do two containers of the
rank run."""

import contextlib
import json
import os
import signal
import threading
import time
from typing import Any

from testbed import cluster as cluster_tool
from testbed import containerd, node
from tests.factories import trainer_manifest
from tests.harness import Cluster, condition, eventually


def running_tasks() -> set[str]:
    """Container ids of the tasks running on the real node."""
    out = containerd.ctr(containerd.node_dir(), "tasks", "ls")
    return {line.split()[0] for line in out.splitlines()[1:] if line.split() and line.split()[-1] == "RUNNING"}


class Tasks:
    """The running tasks, sampled twice a second in a thread until stopped."""

    def __init__(self) -> None:
        self.samples: list[set[str]] = []
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(cluster_tool.ClusterError):  # containerd busy: the next sample counts
                self.samples.append(running_tasks())
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()


def container_id(pod: dict[str, Any]) -> str | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    found = next((s.get("containerID") for s in statuses if s.get("containerID")), None)
    return str(found).removeprefix("containerd://") if found else None


def pod_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    return next((p for p in items if p["metadata"]["name"] == name), None)


def test_a_rank_on_a_node_that_stops_answering_never_runs_twice(
    cluster: Cluster, real_namespace: str, operator_in_cluster: None
) -> None:
    namespace, rank = real_namespace, "partitioned-worker-0"
    script = "trap 'exit 0' TERM; while true; do sleep 1; done"  # a rank that lives until stopped
    manifest = trainer_manifest(
        "partitioned",
        epochs=1,
        topology={"workers": 1},
        image=node.BUSYBOX_IMAGE,
        command=["sh", "-c", script],
        # busybox's user is root, which the restricted default refuses: a user of its own
        podTemplateOverrides={"worker": {"spec": {"securityContext": {"runAsUser": 65532}}}},
    )
    cluster.apply(manifest, namespace)

    def started() -> dict[str, Any] | None:
        pod = pod_of(cluster, namespace, rank)
        return pod if pod and pod["status"].get("phase") == "Running" and container_id(pod) else None

    old = eventually(started, timeout=180, what="the rank's container to run on the real node")
    old_container = container_id(old)
    assert old_container is not None
    tasks = Tasks()
    kubelet = cluster_tool.running_pid(containerd.node_dir(), "kubelet")
    assert kubelet is not None
    os.kill(kubelet, signal.SIGKILL)  # its containers go on: containerd and their shims keep them
    partitioned = time.monotonic()
    try:

        def held() -> dict[str, Any] | None:
            pod = pod_of(cluster, namespace, rank)
            trainer = cluster.get("trainer", "partitioned", namespace)
            # the trainer holds the replacement for the node; or the quota, which places the run
            # (all-or-nothing) and finds no other node its pods tolerate, queues the run again
            waiting = condition(trainer, "Restarting").get("reason") == "WaitingForLostNode"
            queued = condition(trainer, "QuotaAdmitted").get("reason") == "CapacityLost"
            return pod if pod and pod["metadata"].get("deletionTimestamp") and (waiting or queued) else None

        # The node turns NotReady (the controller-manager), then lost (--node-lost-seconds): the
        # pod is deleted, not forced, and its replacement waits.
        going = eventually(held, timeout=240, what="the pod deleted and its replacement held for the node")
        assert going["metadata"]["uid"] == old["metadata"]["uid"]
        assert old_container in running_tasks()  # the partitioned rank is still alive: one of it
    finally:
        node.main(["up"])  # the kubelet again (the node comes back)
    came_back = time.monotonic()

    def replaced() -> dict[str, Any] | None:
        pod = started()
        return pod if pod and pod["metadata"]["uid"] != old["metadata"]["uid"] else None

    new = eventually(replaced, timeout=180, what="the replacement to run once the node confirmed the old one stopped")
    new_container = container_id(new)
    tasks.stop()
    assert not [s for s in tasks.samples if old_container in s and new_container in s], "the rank ran twice"
    print(
        f"partition: pod held {came_back - partitioned:.0f} s while the node was silent; "
        f"replacement running {time.monotonic() - came_back:.1f} s after the node came back"
    )
