"""Kubeflow v1 jobs on the real API server, carried out by Trainers (docs/kubeflow.md): the kubeflow
controller running as its ServiceAccount beside the others, pods on kwok nodes."""

import json
import os
import signal
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster, eventually
from tests.integration.test_faults import kill_9, only_where_the_api_server_may_restart
from trainerop_common.api.kubeflow import KUBEFLOW_API_VERSION
from trainerop_kubeflow.kinds import JOB_KINDS

SIM = "sim.trainer.operator.kubeflow.org"


def replica(container: str, replicas: int = 1, succeed_after: str | None = None, **extra: Any) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {"containers": [{"name": container, "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    }
    if succeed_after:  # kwok (the pod's node) ends it with exit code 0 then
        template["metadata"] = {"annotations": {f"{SIM}/succeed-after": succeed_after}}
    return {"replicas": replicas, "template": template, **extra}


def job(kind: str, name: str, specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    field = JOB_KINDS[kind].specs_field
    return {
        "apiVersion": KUBEFLOW_API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": {field: specs, **spec},
    }


def state(cluster: Cluster, plural: str, name: str, namespace: str) -> str:
    """What `kubectl get <plural>` shows in its STATE column."""
    out = cluster.kubectl("get", plural, name, "-n", namespace, "--no-headers")
    return out.split()[1] if len(out.split()) > 2 else ""


@pytest.mark.smoke
def test_a_pytorchjob_runs_as_upstream_runs_it(cluster: Cluster, namespace: str) -> None:
    specs = {"Master": replica("pytorch", restartPolicy="OnFailure"), "Worker": replica("pytorch", 2)}
    cluster.apply(job("PyTorchJob", "mnist", specs), namespace)
    trainer = eventually(lambda: cluster.get("trainer", "mnist", namespace), what="the job's Trainer")
    (owner,) = trainer["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("PyTorchJob", "mnist", True)
    assert eventually(lambda: state(cluster, "pytorchjobs", "mnist", namespace) == "Running", what="STATE Running")
    pods = {
        p["metadata"]["name"]: p
        for p in json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    }
    assert set(pods) == {"mnist-master-0", "mnist-worker-0", "mnist-worker-1"}  # upstream's names
    master = pods["mnist-master-0"]["metadata"]["labels"]
    assert master["training.kubeflow.org/job-name"] == "mnist"
    assert master["training.kubeflow.org/replica-type"] == "master"
    assert master["training.kubeflow.org/job-role"] == "master"
    env = {e["name"]: e.get("value") for e in pods["mnist-worker-1"]["spec"]["containers"][0]["env"]}
    assert (env["MASTER_ADDR"], env["RANK"], env["WORLD_SIZE"]) == ("mnist-master-0.mnist", "2", "3")
    status = cluster.get("pytorchjob", "mnist", namespace)["status"]
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running"]
    assert status["conditions"][0]["reason"] == "PyTorchJobCreated"
    assert status["replicaStatuses"]["Worker"]["active"] == 2
    assert status["startTime"]


def test_a_job_upstream_refuses_fails_validation_and_gets_no_trainer(cluster: Cluster, namespace: str) -> None:
    specs = {"Master": replica("pytorch", 2), "Worker": replica("pytorch")}
    cluster.apply(job("PyTorchJob", "two-masters", specs), namespace)

    def failed() -> dict[str, Any] | None:
        conditions = (cluster.get("pytorchjob", "two-masters", namespace).get("status") or {}).get("conditions") or []
        return conditions[-1] if conditions and conditions[-1]["type"] == "Failed" else None

    condition = eventually(failed, what="the job Failed")
    assert condition["reason"] == "PyTorchJobFailedValidation"
    assert "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1" in condition["message"]
    assert "two-masters" not in cluster.names("trainers", namespace)


def test_a_tfjob_with_every_role_and_its_end(cluster: Cluster, namespace: str) -> None:
    specs = {
        "Chief": replica("tensorflow", succeed_after="3s"),
        "Worker": replica("tensorflow", 2),
        "PS": replica("tensorflow"),
        "Evaluator": replica("tensorflow"),
    }
    cluster.apply(job("TFJob", "tf", specs, runPolicy={"ttlSecondsAfterFinished": 5}), namespace)

    def with_the_chief() -> set[str] | None:  # the pods are created one by one: a list may come before the chief's
        names = cluster.names("pods", namespace)
        return names if "tf-chief-0" in names else None

    names = eventually(with_the_chief, what="the chief's pod")
    assert names <= {"tf-chief-0", "tf-worker-0", "tf-worker-1", "tf-ps-0", "tf-evaluator-0"}
    chief = cluster.get("pod", "tf-chief-0", namespace)
    tf_config = json.loads(next(e["value"] for e in chief["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"))
    assert tf_config["task"] == {"type": "chief", "index": 0}
    assert set(tf_config["cluster"]) == {"chief", "evaluator", "ps", "worker"}
    # The chief's success is the job's (TFJob's default success policy); past its TTL it goes.
    assert eventually(lambda: state(cluster, "tfjobs", "tf", namespace) == "Succeeded", what="STATE Succeeded")
    assert eventually(lambda: "tf" not in cluster.names("tfjobs", namespace), what="the job deleted past its TTL")
    assert eventually(lambda: "tf" not in cluster.names("trainers", namespace), what="its Trainer gone with it")


def test_the_gangs_priority_class_is_the_runs_priority_under_the_namespaces_quota_policy(
    cluster: Cluster, namespace: str, policy: Any
) -> None:
    governing = policy(budgets={"onDemand": {"nvidia.com/gpu": 8}}, priorityClasses=[{"name": "high", "value": 100}])
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch")}
    gang = {"priorityClass": "high", "minAvailable": 2, "queue": "default", "scheduleTimeoutSeconds": 60}
    cluster.apply(job("PyTorchJob", "urgent", specs, runPolicy={"schedulingPolicy": gang}), namespace)

    def priority() -> int | None:
        quota = (cluster.get("trainer", "urgent", namespace).get("status") or {}).get("quota") or {}
        return quota.get("priority") if quota.get("admittedTime") else None

    assert eventually(priority, what="the run admitted with its priority") == 100
    assert eventually(lambda: state(cluster, "pytorchjobs", "urgent", namespace) == "Running", what="Running")
    unknown = {"schedulingPolicy": {"priorityClass": "critical"}}
    cluster.apply(job("PyTorchJob", "unknown", specs, runPolicy=unknown), namespace)

    def quota_condition() -> dict[str, Any] | None:
        conditions = (cluster.get("trainer", "unknown", namespace).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "QuotaAdmitted"), None)

    held = eventually(quota_condition, what="the job's Trainer held by its quota")
    assert held["reason"] == "PriorityClassNotFound", held
    assert f"not defined by QuotaPolicy {governing} (it defines: high)" in held["message"], held
    assert not [p for p in cluster.names("pods", namespace) if p.startswith("unknown-")]
    # the fix the condition points to: the policy defines the class
    classes = [{"name": "high", "value": 100}, {"name": "critical", "value": 1000}]
    policy(budgets={"onDemand": {"nvidia.com/gpu": 8}}, priorityClasses=classes)
    assert eventually(lambda: state(cluster, "pytorchjobs", "unknown", namespace) == "Running", what="Running")


def test_a_suspended_job_says_so_and_resumes(cluster: Cluster, namespace: str) -> None:
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch")}
    cluster.apply(job("PyTorchJob", "paused", specs, runPolicy={"suspend": True}), namespace)
    assert eventually(lambda: state(cluster, "pytorchjobs", "paused", namespace) == "Suspended", what="Suspended")
    assert not cluster.names("pods", namespace)
    cluster.kubectl(
        "patch",
        "pytorchjob",
        "paused",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"suspend":false}}}',
    )
    assert eventually(lambda: state(cluster, "pytorchjobs", "paused", namespace) == "Running", what="Running again")
    resumed = next(
        c for c in cluster.get("pytorchjob", "paused", namespace)["status"]["conditions"] if c["type"] == "Suspended"
    )
    assert (resumed["status"], resumed["reason"]) == ("False", "PyTorchJobResumed")


def test_a_job_left_to_another_controller_is_not_touched(cluster: Cluster, namespace: str) -> None:
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch")}
    other = job("PyTorchJob", "elsewhere", specs, runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    cluster.apply(other, namespace)
    cluster.apply(job("PyTorchJob", "marker", specs), namespace)  # handled after it: the controller got to both
    eventually(lambda: cluster.get("trainer", "marker", namespace), what="the other job's Trainer")
    assert "elsewhere" not in cluster.names("trainers", namespace)
    assert not cluster.get("pytorchjob", "elsewhere", namespace).get("status")


def test_killed_in_a_burst_of_jobs_it_makes_each_its_one_trainer(cluster: Cluster, namespace: str) -> None:
    count = 30
    specs = {"Worker": replica("pytorch", 1)}
    jobs = [job("PyTorchJob", f"j{i:02d}", specs) for i in range(count)]
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs})
    )
    eventually(lambda: len(cluster.names("trainers", namespace)) >= 5, what="the first Trainers")
    kill_9("kubeflow")

    def all_running() -> bool:
        listed = json.loads(cluster.kubectl("get", "pytorchjobs", "-n", namespace, "-o", "json"))["items"]
        states = [((j.get("status") or {}).get("conditions") or [{}])[-1].get("type") for j in listed]
        return states.count("Running") == count

    assert eventually(all_running, timeout=180, what="every job Running after the kill")
    assert cluster.names("trainers", namespace) == {f"j{i:02d}" for i in range(count)}
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"j{i:02d}-worker-0" for i in range(count))


def test_a_jobs_trainer_deleted_by_hand_is_made_again_at_once(cluster: Cluster, namespace: str) -> None:
    """Upstream makes a deleted pod of a job again; here the job's Trainer is what it makes, and it
    does so on the Trainer's deletion, not at the next resync (5 min)."""
    cluster.apply(job("PyTorchJob", "kept", {"Master": replica("pytorch"), "Worker": replica("pytorch")}), namespace)
    first = eventually(lambda: cluster.get("trainer", "kept", namespace), what="the job's Trainer")["metadata"]["uid"]
    eventually(lambda: state(cluster, "pytorchjobs", "kept", namespace) == "Running", what="the job Running")
    cluster.kubectl("delete", "trainer", "kept", "-n", namespace, "--wait=true")

    def made_again() -> bool:
        names = cluster.names("trainers", namespace)
        return "kept" in names and cluster.get("trainer", "kept", namespace)["metadata"]["uid"] != first

    eventually(made_again, timeout=60, what="the job's Trainer made again")
    assert eventually(lambda: state(cluster, "pytorchjobs", "kept", namespace) == "Running", what="Running again")


def test_a_job_deleted_while_the_watch_is_away_is_forgotten_after_the_relist(cluster: Cluster, namespace: str) -> None:
    """The kubeflow controller frozen while the API server restarts, a job is deleted and etcd
    compacted: its watch of jobs resumes with 410 Gone and kopf lists again, reporting only the jobs
    that exist. The job deleted meanwhile must leave its queue (else each resync would reconcile a
    job that is gone). The deleted job is one left to another controller: it has no Trainer whose
    deletion would bring it to the controller's attention."""
    only_where_the_api_server_may_restart()

    def watched() -> float:
        return cluster.metric("kubeflow", "operator_watched_objects", {"controller": "kubeflow", "kind": "PyTorchJob"})

    def every_job() -> int:
        return len(json.loads(cluster.kubectl("get", "pytorchjobs", "-A", "-o", "json"))["items"])

    specs = {"Worker": replica("pytorch")}
    cluster.apply(job("PyTorchJob", "stays", specs), namespace)
    cluster.apply(job("PyTorchJob", "doomed", specs, runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}), namespace)
    eventually(lambda: cluster.names("trainers", namespace) == {"stays"}, what="the job's Trainer")
    eventually(lambda: watched() == every_job(), what="the controller to know every job")
    pid = cluster_tool.running_pid(localdev.state_dir(), "controller-kubeflow")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        cluster_tool.restart("kube-apiserver")
        cluster.kubectl("delete", "pytorchjob", "doomed", "-n", namespace)
        cluster_tool.compact_etcd()
    finally:
        os.kill(pid, signal.SIGCONT)
    eventually(lambda: watched() == every_job(), timeout=60, what="the kubeflow controller to forget the job")
