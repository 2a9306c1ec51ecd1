"""Save before a disruption on the real node (docs/checkpoints.md "Save before a disruption"): the
JAX example gets a reclaim notice mid-run; the checkpoint controller asks its three processes,
through their Leases, to save at one step a little ahead; they read it from their heartbeats and
save there, mid-epoch; that checkpoint commits, the run's pods stop (no other node takes them)
and, once the node is back, the run resumes from the step it saved (or from a later one, when the
stopped pods' SIGTERM saves commit too), not from the last epoch's."""

import json
import time
from typing import Any

from testbed import node
from tests.e2e.test_training import RESUME_LINE, epochs, example, finished, last_lines, logs, trainer
from tests.harness import Cluster, condition, eventually
from trainerop_sdk.layout import checkpoint_path

G = "trainer.operator.kubeflow.org"
RECLAIM_TAINT = f"{G}/reclaim=notice:NoSchedule"
STEPS_PER_EPOCH = 32


def save_request(cluster: Cluster, namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    request = (trainer(cluster, namespace, name).get("status", {}).get("checkpoint") or {}).get("saveRequest") or {}
    return request if request.get("phase") in phases else None


def capacity_lost(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    obj = trainer(cluster, namespace, "noticed")
    return obj if condition(obj, "QuotaAdmitted").get("reason") == "CapacityLost" else None


def test_a_reclaim_notice_saves_at_one_step_and_the_run_resumes_from_that_step(
    cluster: Cluster, real_namespace: str, jax_image: str
) -> None:
    manifest = example("noticed")
    # A heartbeat every 8 steps: the save is asked 16 steps ahead, within the next epoch.
    manifest["spec"]["env"].append({"name": "HEARTBEAT_STEPS", "value": "8"})
    cluster.apply(manifest, real_namespace)

    def training() -> int | None:
        status = trainer(cluster, real_namespace, "noticed").get("status", {})
        latest = (status.get("checkpoint") or {}).get("latestStep") or 0
        return latest if latest >= 2 * STEPS_PER_EPOCH and status.get("phase") == "Running" else None

    committed_before = eventually(training, timeout=300, what="two epochs' checkpoints to commit")
    noticed = time.monotonic()
    cluster.kubectl("taint", "node", node.NODE, RECLAIM_TAINT)
    try:
        asked = eventually(
            lambda: save_request(cluster, real_namespace, "noticed", "Requested", "Committed", "Missed"),
            timeout=60,
            what="the save request",
        )
        assert asked["reason"] == "SpotReclaimed", asked
        saved = eventually(
            lambda: save_request(cluster, real_namespace, "noticed", "Committed", "Missed"),
            timeout=120,
            what="the requested save to commit",
        )
        seconds_to_commit = time.monotonic() - noticed
        assert saved["phase"] == "Committed", json.dumps(saved) + last_lines(cluster, real_namespace, "noticed")
        step = int(saved["step"])
        assert saved["checkpoint"] == f"noticed-step-{step}"  # every process's shard, saved at that step
        assert step > committed_before
        # No other node takes the run: its pods stop, and it queues until capacity comes back.
        stopped = eventually(lambda: capacity_lost(cluster, real_namespace), timeout=120, what="the run to stop")
        reached = int(stopped["status"]["progress"]["step"])
        print(f"save requested at step {step}, committed {seconds_to_commit:.1f}s after the notice")
    finally:
        cluster.kubectl("taint", "node", node.NODE, f"{G}/reclaim-")

    done = eventually(lambda: finished(cluster, real_namespace, "noticed"), timeout=600, what="the run to finish")
    directory = f"{manifest['spec']['checkpoint']['bucket']}/{real_namespace}/noticed"
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"], indent=1)
    resumed_at = set()
    for index in range(3):
        log = logs(cluster, real_namespace, f"noticed-worker-{index}")
        [(path, at)] = RESUME_LINE.findall(log)
        assert path == checkpoint_path(directory, int(at))
        resumed_at.add(int(at))
        assert "starting from scratch" not in log
        assert epochs(log)[-1][:2] == (12, 384)
    # Every process resumed from one checkpoint: the one saved on request or, when all three of the
    # stopped pods saved on SIGTERM and that checkpoint committed too, that later one; never the
    # last epoch's.
    [resumed] = resumed_at
    assert resumed >= step, (resumed, step)
    print(f"resumed from step {resumed}: {max(reached - resumed, 0)} steps trained were lost")
