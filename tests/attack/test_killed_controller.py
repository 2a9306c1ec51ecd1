"""A controller's process killed with SIGKILL on the deployed operator (the OOM killer, a node's
trouble, an attacker in its container): the kubelet restarts it in its pod, and it works again as
soon as it is up — its peering identity is the pod's name and its priority derived from it, so it
does not wait for its own last peering record to expire (60 s at the shipped lifetime). Measured:
from the kill to a deleted worker's replacement (reported, not asserted)."""

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed import localdev
from tests.factories import trainer_manifest
from tests.harness import Cluster, eventually

ENTRY = "trainerop-trainer"  # the trainer controller's console script (its container's command)


def leader(cluster: Cluster) -> str:
    """The pod of the trainer controller's replica that works: of its running pods, the one with
    the highest peering priority (records of earlier deployments' pods may linger)."""
    status = cluster.get("clusterkopfpeering", "trainer-operator-trainer").get("status") or {}
    selector = "app.kubernetes.io/name=trainer-operator-trainer"
    listed = json.loads(cluster.kubectl("get", "pods", "-n", localdev.NAMESPACE, "-l", selector, "-o", "json"))
    running = {  # not one an overlay's rollout is removing (it may still hold the highest priority)
        p["metadata"]["name"]
        for p in listed["items"]
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }
    return str(max(running & set(status), key=lambda pod: int(status[pod]["priority"])))


def kill_9(pod: str) -> None:
    """SIGKILL the controller process running in ``pod`` (its containers are this host's processes)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(ENTRY.encode()) for arg in argv[:2]) and f"POD_NAME={pod}".encode() in environ:
            os.kill(int(proc.name), signal.SIGKILL)
            return
    raise AssertionError(f"no {ENTRY} process of pod {pod} on this host")


def worker(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", "trainer-name=kept", "-o", "json"))
    running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return running[0] if running else None


def test_a_killed_trainer_controller_is_back_and_replaces_a_deleted_worker(
    cluster: Cluster, overlay: str, namespace: str, record_property: Callable[[str, object], None]
) -> None:
    cluster.apply(trainer_manifest("kept", topology={"workers": 1}), namespace)
    first = eventually(lambda: worker(cluster, namespace), what="the run's worker")
    pod = leader(cluster)
    before = int(status_of(cluster, pod)["restartCount"])
    killed = time.monotonic()
    kill_9(pod)
    cluster.kubectl("delete", "pod", first["metadata"]["name"], "-n", namespace, "--wait=false")

    def replaced() -> dict[str, Any] | None:
        now = worker(cluster, namespace)
        return now if now and now["metadata"]["uid"] != first["metadata"]["uid"] else None

    eventually(replaced, timeout=120, what="the worker replaced by the restarted controller")
    seconds = round(time.monotonic() - killed, 1)
    record_property(f"replaced_after_kill_seconds_{overlay}", seconds)
    print(f"{overlay}: worker replaced {seconds} s after the trainer controller's kill -9")
    # The kill took: the kubelet restarted the container, which is Ready again, and the API server
    # reaches its webhook through the Service again (a Trainer's create is checked by it).
    eventually(lambda: ready_after_a_restart(cluster, pod, before), what="the restarted controller Ready")
    probe = json.dumps(trainer_manifest("probe", topology={"workers": 1}))
    eventually(
        lambda: cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=probe),
        what="the trainer controller's webhook answering the API server again",
    )
    logs = cluster.kubectl("logs", pod, "-n", localdev.NAMESPACE, "-c", "controller")
    assert "Pausing operations" not in logs  # it did not wait for its own last record to expire


def status_of(cluster: Cluster, pod: str) -> dict[str, Any]:
    (status,) = cluster.get("pod", pod, localdev.NAMESPACE)["status"]["containerStatuses"]
    return dict(status)


def ready_after_a_restart(cluster: Cluster, pod: str, restarts_before: int) -> bool:
    status = status_of(cluster, pod)
    return bool(status["ready"]) and int(status["restartCount"]) > restarts_before
