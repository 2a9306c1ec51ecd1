"""Save before a disruption against the real API server, S3 server and controllers
(docs/checkpoints.md "Save before a disruption"): a reclaim notice under a run with checkpoints
makes the checkpoint controller ask every rank, through its Lease, to save at one step; the
rank's heartbeat reads it; the checkpoint at that step commits and the quota controller moves the
run, whose new pod resumes from it. A user asks with `kubectl trainer checkpoint`; a save that is
not committed by its deadline is reported missed."""

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import localdev
from tests.factories import trainer_manifest
from tests.harness import Cluster, condition, eventually
from tests.integration.test_checkpoints import as_pod
from tests.integration.test_heartbeats import beat_as
from tests.integration.test_quota import domain_free, placed_on
from trainerop_client.cli import main as kubectl_trainer
from trainerop_sdk.layout import checkpoint_path

G = "trainer.operator.kubeflow.org"
GPU = "nvidia.com/gpu"
RECLAIM_TAINT = f"{G}/reclaim=notice:NoSchedule"


def save_request(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    obj = cluster.get("trainer", name, namespace)
    request = ((obj.get("status") or {}).get("checkpoint") or {}).get("saveRequest") or {}
    return request if request.get("phase") == phase else None


def lease_says(cluster: Cluster, namespace: str, lease: str) -> str | None:
    return (cluster.get("lease", lease, namespace)["metadata"].get("annotations") or {}).get(f"{G}/save-at-step")


def reasons(cluster: Cluster, namespace: str) -> dict[str, str]:
    items = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return {e["reason"]: e["message"] for e in items}


def running(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    cluster.apply(manifest, namespace)
    name = manifest["metadata"]["name"]
    return eventually(
        lambda: (t := cluster.get("trainer", name, namespace)).get("status", {}).get("phase") == "Running" and t,
        what=f"{name} to run",
    )


def one_gpu_node_run(name: str, bucket: str, selector: dict[str, str]) -> dict[str, Any]:
    """One worker of a whole 8-GPU node on the nodes ``selector`` picks, checkpointing to ``bucket``."""
    return trainer_manifest(
        name,
        resources={"limits": {GPU: 8}},
        topology={"workers": 1, "replicationFactor": 3},
        checkpoint={"bucket": bucket, "credentialsSecret": "ckpt-creds", "maxRetention": 2},
        podTemplateOverrides={"worker": {"spec": {"nodeSelector": selector}}},
    )


def cli(cluster: Cluster, namespace: str, *args: str) -> int:
    return kubectl_trainer([*args, "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)])


def test_a_reclaim_notice_saves_at_one_step_then_moves_the_run_which_resumes_from_it(
    cluster: Cluster, namespace: str, policy: Any, bucket: str
) -> None:
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="SpotFirst")
    domain_free(cluster, "nvl-0")  # kwok-gpu-0 on-demand, kwok-gpu-1 spot
    trainer = running(cluster, namespace, one_gpu_node_run("saver", bucket, {f"{G}/nvlink-domain": "nvl-0"}))
    (pod,) = eventually(lambda: placed_on(cluster, namespace, "saver", "spot", 1), what="the pod on spot")
    node = pod["spec"]["nodeName"]
    beat = beat_as(cluster, namespace, "saver-worker-0")
    beat.send(1, step=10)
    beat.send(1, step=20)  # 10 steps a beat
    try:
        cluster.kubectl("taint", "node", node, RECLAIM_TAINT)
        request = eventually(lambda: save_request(cluster, namespace, "saver", "Requested"), what="a save request")
        assert (request["reason"], request["step"]) == ("SpotReclaimed", 40)  # 20 + two beats of 10
        renegotiation = trainer_quota(cluster, namespace)["renegotiation"]
        assert renegotiation["waitingForCheckpoint"]
        assert request["deadline"] == renegotiation["deadline"]
        eventually(lambda: lease_says(cluster, namespace, "saver-worker-0") == "40", what="the rank's Lease asked")
        beat.send(1, step=30)  # the rank reads the request from its heartbeat's answer
        assert beat.save_requested(40)
        assert not beat.save_requested(30)
        as_pod(cluster, namespace, trainer).save(b"state at step 40", step=40, epoch=1)

        done = eventually(lambda: save_request(cluster, namespace, "saver", "Committed"), what="the save committed")
        assert done["checkpoint"] == "saver-step-40"
        moved = eventually(lambda: placed_on(cluster, namespace, "saver", "on-demand", 1), what="the run moved")
        assert condition(cluster.get("trainer", "saver", namespace), "QuotaAdmitted")["reason"] == "Renegotiated"
        env = {e["name"]: e.get("value") for e in moved[0]["spec"]["containers"][0]["env"]}
        assert env["RESUME_FROM"] == checkpoint_path(f"{bucket}/{namespace}/saver", 40)
        said = reasons(cluster, namespace)
        assert "every rank saves at step 40" in said["SaveRequested"]
        assert said["SaveCommitted"] == "saver-step-40 (step 40) committed for SpotReclaimed"
        assert (
            cluster.metric(
                "checkpoint", "checkpoint_save_requests_total", {"reason": "SpotReclaimed", "phase": "Committed"}
            )
            >= 1
        )
    finally:
        cluster.kubectl("taint", "node", node, f"{G}/reclaim-")


def trainer_quota(cluster: Cluster, namespace: str, name: str = "saver") -> dict[str, Any]:
    return dict(cluster.get("trainer", name, namespace)["status"]["quota"])


def test_a_drain_waits_for_the_save_then_the_run_moves_and_the_drain_completes(
    cluster: Cluster, namespace: str, policy: Any, bucket: str
) -> None:
    """kubectl drain cordons the node, then evicts its pods: the run's drain guard (a
    PodDisruptionBudget the trainer keeps) refuses the eviction of its rank, which saves at the
    step asked; the quota controller moves the run, the trainer deletes the old pod, and the
    drain, which kept retrying, completes (docs/design/disruption.md, decision 5)."""
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="SpotFirst")
    domain_free(cluster, "nvl-0")
    trainer = running(cluster, namespace, one_gpu_node_run("drained", bucket, {f"{G}/nvlink-domain": "nvl-0"}))
    (pod,) = eventually(lambda: placed_on(cluster, namespace, "drained", "spot", 1), what="the pod on spot")
    node = pod["spec"]["nodeName"]
    guard = eventually(lambda: cluster.get("pdb", "drained", namespace)["spec"], what="the drain guard")
    assert guard["minAvailable"] == 1
    beat = beat_as(cluster, namespace, "drained-worker-0")
    beat.send(1, step=10)
    beat.send(1, step=20)
    drain = subprocess.Popen(
        [
            *(str(cluster.kubectl_bin), f"--kubeconfig={cluster.kubeconfig}", "drain", node),
            *("--delete-emptydir-data", "--pod-selector", "trainer-name=drained", "--timeout=240s"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        request = eventually(lambda: save_request(cluster, namespace, "drained", "Requested"), what="a save request")
        assert request["reason"] == "NodeDrained"
        assert f"node {node} is cordoned (drained)" in request["message"]
        assert trainer_quota(cluster, namespace, "drained")["renegotiation"]["reason"] == "NodeDrained"
        eventually(lambda: lease_says(cluster, namespace, "drained-worker-0") == "40", what="the rank's Lease asked")
        still = cluster.get("pod", "drained-worker-0", namespace)
        assert still["metadata"]["uid"] == pod["metadata"]["uid"]
        assert not still["metadata"].get("deletionTimestamp")
        assert drain.poll() is None  # the drain retries its eviction meanwhile
        beat.send(1, step=30)
        assert beat.save_requested(40)
        as_pod(cluster, namespace, trainer).save(b"state at step 40", step=40, epoch=1)

        eventually(lambda: save_request(cluster, namespace, "drained", "Committed"), what="the save committed")
        moved = eventually(lambda: placed_on(cluster, namespace, "drained", "on-demand", 1), what="the run moved")
        env = {e["name"]: e.get("value") for e in moved[0]["spec"]["containers"][0]["env"]}
        assert env["RESUME_FROM"] == checkpoint_path(f"{bucket}/{namespace}/drained", 40)
        output, _ = drain.communicate(timeout=120)
        assert drain.returncode == 0, output
        assert "violate the pod's disruption budget" in output  # refused until the run had saved
        assert f"node/{node} drained" in output
    finally:
        if drain.poll() is None:
            drain.kill()
        cluster.kubectl("uncordon", node)


def small_run(name: str, bucket: str) -> dict[str, Any]:
    return trainer_manifest(
        name,
        topology={"workers": 2, "replicationFactor": 3},
        checkpoint={"bucket": bucket, "credentialsSecret": "ckpt-creds", "maxRetention": 2},
    )


def test_kubectl_trainer_checkpoint_asks_every_rank_and_waits_for_the_commit(
    cluster: Cluster, namespace: str, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = running(cluster, namespace, small_run("alpha", bucket))
    ranks = [beat_as(cluster, namespace, f"alpha-worker-{i}") for i in (0, 1)]
    for rank in ranks:
        rank.send(1, step=32)
        rank.send(2, step=64)  # 32 steps a beat: the save is asked at 64 + 64
    ckpt = as_pod(cluster, namespace, trainer)

    def ranks_save() -> None:
        """What the training code does: beat, see the request, save its shard at that step."""
        eventually(lambda: all(lease_says(cluster, namespace, f"alpha-worker-{i}") for i in (0, 1)), what="asked")
        for i, rank in enumerate(ranks):
            rank.send(3, step=96)
            if rank.save_requested(128):
                ckpt.save(f"shard {i} at 128".encode(), step=128, epoch=4, shard=i)

    saving = threading.Thread(target=ranks_save)
    saving.start()
    assert cli(cluster, namespace, "checkpoint", "alpha", "--wait", "--timeout", "60") == 0
    saving.join()
    out = capsys.readouterr().out
    assert "checkpoint requested at" in out
    assert "every rank saves at step 128 (the furthest reported is 64)" in out
    assert "checkpoint alpha-step-128 committed at step 128" in out
    request = save_request(cluster, namespace, "alpha", "Committed")
    assert request is not None
    assert request["reason"] == "Requested"
    # Asked once: the annotation stays, and nothing is asked again.
    time.sleep(2)
    assert save_request(cluster, namespace, "alpha", "Committed") == request


@pytest.fixture
def short_deadline(cluster: Cluster) -> Iterator[None]:
    """The checkpoint controller restarted to give a user's save 3 seconds."""
    localdev.restart("checkpoint", {"TRAINEROP_SAVE_DEADLINE_SECONDS": "3"})
    yield
    localdev.restart("checkpoint")


def test_a_save_not_committed_by_its_deadline_is_missed_and_says_where_the_run_moves_from(
    cluster: Cluster, namespace: str, bucket: str, short_deadline: None
) -> None:
    running(cluster, namespace, small_run("beta", bucket))
    # No rank reports steps (no heartbeats): nothing can be asked, it is missed at once.
    assert cli(cluster, namespace, "checkpoint", "beta") == 0
    missed = eventually(lambda: save_request(cluster, namespace, "beta", "Missed"), what="missed at once")
    assert "step" not in missed
    assert "no rank reports its step" in missed["message"]

    beat_as(cluster, namespace, "beta-worker-0").send(1, step=5)
    time.sleep(1.1)  # a later request (the times are whole seconds)
    assert cli(cluster, namespace, "checkpoint", "beta") == 0
    asked = eventually(lambda: save_request(cluster, namespace, "beta", "Requested"), what="a new request")
    assert asked["step"] == 15  # no beat measured yet: --save-margin-steps
    missed = eventually(lambda: save_request(cluster, namespace, "beta", "Missed"), what="the deadline to pass")
    assert missed["id"] == asked["id"]
    # two SaveMissed Events (the first request's too), in no promised order
    items = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    (said,) = [e["message"] for e in items if e["reason"] == "SaveMissed" and "at step 15" in e["message"]]
    assert said.startswith("no checkpoint at step 15 committed by")
    assert said.endswith("for Requested: the run moves from the start (nothing committed yet)")
