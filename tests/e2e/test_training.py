"""The example training job on the real node (examples/jax): three JAX processes in three pods meet
through the operator's env contract and a headless Service's DNS name, train with real gloo
collectives, checkpoint every epoch to S3 (committed by the checkpoint controller with a quorum),
and a worker killed mid-training comes back with its gang from the latest committed checkpoint."""

import json
import re
from pathlib import Path
from typing import Any

import yaml

from testbed import containerd, localdev, node
from testbed.cluster import ClusterError
from tests.harness import Cluster, eventually
from trainerop_client import TrainerClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jax" / "trainer.yaml"
EPOCH_LINE = re.compile(r"epoch (\d+)/(\d+) step (\d+) loss ([0-9.]+)")
RESUME_LINE = re.compile(r"resuming from (\S+): global step (\d+)")


def example(name: str) -> dict[str, Any]:
    """examples/jax/trainer.yaml as users apply it, under another name (its checkpoints go to
    s3://checkpoints/jax-spirals/<namespace>/<name>)."""
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = name
    return manifest


def trainer(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.get("trainer", name, namespace)


def finished(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj = trainer(cluster, namespace, name)
    return obj if obj.get("status", {}).get("phase") in ("Succeeded", "Failed") else None


def logs(cluster: Cluster, namespace: str, pod: str) -> str:
    return cluster.kubectl("logs", "-n", namespace, pod, "-c", "jax")


def last_lines(cluster: Cluster, namespace: str, name: str, workers: int = 3, lines: int = 25) -> str:
    """Each worker's last log lines, for a failure's message (a pod already gone says so)."""
    tails = []
    for index in range(workers):
        pod = f"{name}-worker-{index}"
        try:
            tail = cluster.kubectl("logs", "-n", namespace, pod, "-c", "jax", f"--tail={lines}")
        except ClusterError as err:
            tail = str(err)
        tails.append(f"--- {pod}\n{tail}")
    return "\n".join(tails)


def epochs(log: str) -> list[tuple[int, int, float]]:
    """(epoch, global step, mean loss) of each epoch a process reported."""
    return [(int(m[1]), int(m[3]), float(m[4])) for m in EPOCH_LINE.finditer(log)]


def checkpoint_phases(cluster: Cluster, namespace: str, name: str) -> dict[int, str]:
    items = json.loads(
        cluster.kubectl("get", "checkpoints", "-n", namespace, "-l", f"trainer-name={name}", "-o", "json")
    )
    return {c["spec"]["step"]: c.get("status", {}).get("phase", "") for c in items["items"]}


def test_the_controllers_run_in_the_cluster_from_their_image(cluster: Cluster, operator_in_cluster: None) -> None:
    pods = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", localdev.NAMESPACE, "-l", "app.kubernetes.io/part-of=trainer-operator", "-o", "json"
        )
    )["items"]
    running = {
        p["metadata"]["labels"]["app.kubernetes.io/component"]: p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }
    assert sorted(running) == sorted(localdev.CONTROLLERS)
    for pod in running.values():
        assert pod["spec"]["nodeName"] == node.NODE
        (container,) = pod["spec"]["containers"]
        assert container["image"] == "trainer-operator:dev"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert all(c["ready"] for c in pod["status"]["containerStatuses"])


def test_the_example_trains_across_three_pods_to_completion(
    cluster: Cluster, real_namespace: str, jax_image: str
) -> None:
    cluster.apply(example("spirals"), real_namespace)
    done = eventually(lambda: finished(cluster, real_namespace, "spirals"), timeout=600, what="the run to finish")
    status = done["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["topology"]["replicas"]["worker"]["restarts"] == 0

    for index in range(3):
        log = logs(cluster, real_namespace, f"spirals-worker-{index}")
        # The env contract and DNS rendezvous: every process joined worker 0's coordinator by its
        # name under the Trainer's headless Service, and gloo connected it to both peers.
        assert "joining 3 processes at spirals-worker-0.spirals:6666" in log
        assert f"Rank {index} is connected to 2 peer ranks" in log
        reported = epochs(log)
        assert [e for e, _, _ in reported] == list(range(1, 13))
        assert [s for _, s, _ in reported] == [32 * e for e in range(1, 13)]
        assert reported[-1][2] < reported[0][2] / 3, reported  # the loss goes down
        assert "done: 12 epochs, global step 384" in log
    # Every process saw the same global loss: the gradients were all-reduced.
    assert len({tuple(epochs(logs(cluster, real_namespace, f"spirals-worker-{i}"))) for i in range(3)}) == 1
    # Issue 21: the client reads every rank's log from the training container, each line prefixed
    # with its rank; followed, it ends once every pod's log has.
    client = TrainerClient(real_namespace, kubeconfig=str(cluster.kubeconfig))
    for follow in (False, True):
        lines = list(client.logs("spirals", follow=follow))
        for index in range(3):
            finished_line = f"[worker-{index}] [process {index}] done: 12 epochs, global step 384"
            assert any(text.startswith(finished_line) for text in lines), lines[-5:]

    assert status["progress"]["epoch"] == 12
    assert status["progress"]["step"] == 384
    # Issue 21: the heartbeats' total and loss; done is 100 %, with nothing left to estimate.
    assert (status["progress"]["totalSteps"], status["progress"]["percent"]) == (384, 100)
    assert abs(float(status["progress"]["metrics"]["loss"]) - reported[-1][2]) < 1e-4  # the log rounds to 4 places
    assert "estimatedCompletionTime" not in status["progress"]
    assert (status["reason"], status["message"]) == ("Succeeded", "the run finished successfully")
    # Each pod's first heartbeat made its Lease (with its own bound token), owned by the Trainer.
    leases = json.loads(
        cluster.kubectl("get", "leases", "-n", real_namespace, "-l", "trainer-name=spirals", "-o", "json")
    )
    assert sorted(x["metadata"]["name"] for x in leases["items"]) == [f"spirals-worker-{i}" for i in range(3)]
    assert {x["metadata"]["ownerReferences"][0]["uid"] for x in leases["items"]} == {done["metadata"]["uid"]}

    # The API server called the audit webhook through its Service (kube-proxy) and the pod's
    # certificate: the creation is on record with the user who made it.
    records = json.loads(
        cluster.kubectl(
            "get",
            "auditlogs",
            "-n",
            real_namespace,
            "-l",
            "trainer.operator.kubeflow.org/trainer-name=spirals",
            "-o",
            "json",
        )
    )
    created = [r["spec"] for r in records["items"] if r["spec"]["action"] == "Created"]
    assert [r["user"]["username"] for r in created] == ["trainer-operator-admin"]

    # The last checkpoint commits (three shards, 2 of 3 verified copies each) after the pods are
    # done; maxRetention 3 keeps the newest three and collects the rest.
    def committed() -> dict[str, Any] | None:
        checkpoint = trainer(cluster, real_namespace, "spirals")["status"].get("checkpoint", {})
        return checkpoint if checkpoint.get("latestStep") == 384 else None

    checkpoint = eventually(committed, timeout=120, what="the last checkpoint to commit")
    assert checkpoint["committed"] == 3

    def collected() -> dict[int, str] | None:
        phases = checkpoint_phases(cluster, real_namespace, "spirals")
        return phases if list(phases.values()).count("GarbageCollected") == 9 else None

    phases = eventually(collected, timeout=120, what="older checkpoints to be collected")
    assert {step for step, phase in phases.items() if phase == "Committed"} == {320, 352, 384}


def test_a_process_whose_peers_never_come_ends_with_a_code_that_is_retried(
    cluster: Cluster, real_namespace: str, jax_image: str
) -> None:
    """A gang's processes start far apart on a loaded node: one that waits past JAX's start-up
    timeout for the others must end with a code restartPolicy ExitCode retries (128-255: JAX's
    runtime ends it with a signal), not 1 (permanent: a bug in train.py)."""
    env = {"NUM_PROCESSES": "2", "PROCESS_ID": "0", "COORDINATOR_ADDRESS": "127.0.0.1", "INIT_TIMEOUT_SECONDS": "5"}
    container = {"name": "jax", "image": jax_image, "env": [{"name": k, "value": v} for k, v in env.items()]}
    cluster.apply(node.pod_on_the_node("alone", container), real_namespace)

    def done() -> dict[str, Any] | None:
        pod = cluster.get("pod", "alone", real_namespace)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = eventually(done, timeout=180, what="the lone process to give up")
    log = logs(cluster, real_namespace, "alone")
    assert 128 <= pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] <= 255, log
    assert "DEADLINE_EXCEEDED" in log  # JAX's runtime gave up waiting for the other process


def test_a_killed_worker_comes_back_from_the_latest_committed_checkpoint(
    cluster: Cluster, real_namespace: str, jax_image: str
) -> None:
    cluster.apply(example("resumes"), real_namespace)

    def some_committed() -> int | None:
        obj = trainer(cluster, real_namespace, "resumes")
        step = obj.get("status", {}).get("checkpoint", {}).get("latestStep")
        return int(step) if step and step >= 96 and obj["status"]["phase"] == "Running" else None

    committed_before = eventually(some_committed, timeout=300, what="three epochs' checkpoints to commit")
    victim = cluster.get("pod", "resumes-worker-1", real_namespace)
    container = victim["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    # The training process itself dies (SIGKILL, as the kernel's OOM killer would do it).
    containerd.ctr(containerd.node_dir(), "tasks", "kill", "--signal", "SIGKILL", container)

    def replaced() -> dict[str, Any] | None:
        pod = cluster.get("pod", "resumes-worker-1", real_namespace)
        return pod if pod["metadata"]["uid"] != victim["metadata"]["uid"] else None

    replacement = eventually(replaced, timeout=300, what="a replacement for resumes-worker-1")
    env = {e["name"]: e.get("value", "") for e in replacement["spec"]["containers"][0]["env"]}
    resume_from = env["RESUME_FROM"]
    resumed_step = int(resume_from.rsplit("step-", 1)[1])
    assert resumed_step >= committed_before

    done = eventually(lambda: finished(cluster, real_namespace, "resumes"), timeout=600, what="the run to finish")
    status = done["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1) + last_lines(cluster, real_namespace, "resumes")
    # One failure or more: the survivors may fail on the broken collective before the gang restarts.
    assert status["topology"]["replicas"]["worker"]["restarts"] >= 1

    for index in range(3):
        log = logs(cluster, real_namespace, f"resumes-worker-{index}")
        # The whole gang came back from the checkpoint the replacement was given, and the global
        # step went on from it, not from zero.
        (resumed,) = RESUME_LINE.findall(log)
        assert resumed == (resume_from, str(resumed_step))
        assert "starting from scratch" not in log
        reported = epochs(log)
        assert reported[0][1] == resumed_step + 32
        assert reported[-1][:2] == (12, 384)
        assert "done: 12 epochs, global step 384" in log
