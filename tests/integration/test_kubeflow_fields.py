"""Each field of the Kubeflow v1 schemas that changes what is created, or how a job ends, on the
real API server (pods on kwok nodes): the pods' variables per kind and setting, a replica's full
pod template, and runPolicy (restartPolicy per replica, backoffLimit, activeDeadlineSeconds,
cleanPodPolicy). docs/kubeflow.md has the mapping."""

import functools
import json
from typing import Any

import pytest

from tests.harness import Cluster, eventually
from tests.integration.test_kubeflow import job, replica, state
from tests.integration.test_trainer_pods import fail_pod


def env_of(cluster: Cluster, namespace: str, pod: str) -> dict[str, str]:
    obj = eventually(lambda: cluster.get("pod", pod, namespace) if pod in cluster.names("pods", namespace) else None)
    return {e["name"]: e.get("value", "") for e in obj["spec"]["containers"][0].get("env", [])}


def port(container: str, number: int) -> dict[str, Any]:
    """A replica whose training container names the kind's port (upstream's `<kind>-port`)."""
    spec = replica(container)
    spec["template"]["spec"]["containers"][0]["ports"] = [{"name": f"{container}job-port", "containerPort": number}]
    return spec


@pytest.mark.parametrize(
    ("kind", "specs", "extra", "pod", "expected"),
    [
        pytest.param(
            "PyTorchJob",
            {"Master": replica("pytorch"), "Worker": replica("pytorch", 2)},
            {"nprocPerNode": "2"},
            "worker-1",
            {"PET_NPROC_PER_NODE": "2", "WORLD_SIZE": "6", "RANK": "2", "MASTER_ADDR": "{name}-master-0.{name}"},
            id="nprocPerNode multiplies WORLD_SIZE",
        ),
        pytest.param(
            "PyTorchJob",
            {"Master": port("pytorch", 29500), "Worker": replica("pytorch")},
            {},
            "worker-0",
            {"MASTER_PORT": "29500"},
            id="the master's pytorchjob-port is MASTER_PORT",
        ),
        pytest.param(
            "PyTorchJob",
            {"Worker": replica("pytorch", 2)},
            {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"}},
            "worker-1",
            {"PET_NNODES": "1:3", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "{name}-worker-0.{name}:23456"},
            id="elasticPolicy: torchrun's rendezvous on worker 0",
        ),
        pytest.param(
            "JAXJob",
            {"Worker": replica("jax", 2)},
            {},
            "worker-1",
            {"COORDINATOR_ADDRESS": "{name}-worker-0.{name}", "NUM_PROCESSES": "2", "PROCESS_ID": "1"},
            id="JAXJob: the coordinator is worker 0",
        ),
        pytest.param(
            "XGBoostJob",
            {"Master": replica("xgboost"), "Worker": replica("xgboost")},
            {},
            "worker-0",
            {"MASTER_ADDR": "{name}-master-0.{name}"},
            id="XGBoostJob: the master's address",
        ),
    ],
)
def test_each_setting_reaches_the_pods_variables(
    cluster: Cluster,
    namespace: str,
    kind: str,
    specs: dict[str, Any],
    extra: dict[str, Any],
    pod: str,
    expected: dict[str, str],
) -> None:
    name = "fields"
    cluster.apply(job(kind, name, specs, **extra), namespace)
    env = env_of(cluster, namespace, f"{name}-{pod}")
    assert {k: env.get(k) for k in expected} == {k: v.format(name=name) for k, v in expected.items()}


def test_a_tfjob_workers_task_is_in_tf_config(cluster: Cluster, namespace: str) -> None:
    cluster.apply(job("TFJob", "tf", {"Worker": replica("tensorflow", 2)}), namespace)
    tf_config = json.loads(env_of(cluster, namespace, "tf-worker-1")["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert tf_config["cluster"] == {"worker": [f"tf-worker-{i}.tf.{namespace}.svc:2222" for i in range(2)]}


def test_a_replicas_whole_pod_template_is_kept(cluster: Cluster, namespace: str) -> None:
    master = replica("pytorch")
    template = master["template"]
    template["metadata"] = {"labels": {"team": "vision"}, "annotations": {"note": "kept"}}
    template["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox:1.36", "command": ["true"]}]
    template["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    container = template["spec"]["containers"][0]
    container["env"] = [{"name": "DATASET", "value": "digits"}]
    container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    container["resources"] = {"requests": {"cpu": "250m", "memory": "64Mi"}}
    cluster.apply(job("PyTorchJob", "full", {"Master": master, "Worker": replica("pytorch")}), namespace)
    env_of(cluster, namespace, "full-master-0")
    pod = cluster.get("pod", "full-master-0", namespace)
    assert (pod["metadata"]["labels"]["team"], pod["metadata"]["annotations"]["note"]) == ("vision", "kept")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["fetch"]
    assert {"name": "scratch", "emptyDir": {}} in pod["spec"]["volumes"]
    (training,) = pod["spec"]["containers"]
    assert {"name": "scratch", "mountPath": "/scratch"} in training["volumeMounts"]
    assert {"name": "DATASET", "value": "digits"} in training["env"]
    assert training["resources"]["requests"] == {"cpu": "250m", "memory": "64Mi"}
    worker = cluster.get("pod", "full-worker-0", namespace)  # the Worker's own template: none of it
    assert "fetch" not in [c["name"] for c in worker["spec"].get("initContainers", [])]


def running(cluster: Cluster, name: str, namespace: str) -> bool:
    return state(cluster, "pytorchjobs", name, namespace) == "Running"


def failed_condition(cluster: Cluster, plural: str, name: str, namespace: str) -> dict[str, Any] | None:
    conditions = (cluster.get(plural, name, namespace).get("status") or {}).get("conditions") or []
    return conditions[-1] if conditions and conditions[-1]["type"] == "Failed" else None


def test_a_worker_that_fails_is_replaced_under_on_failure_and_ends_the_job_under_never(
    cluster: Cluster, namespace: str
) -> None:
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch", restartPolicy="OnFailure")}
    cluster.apply(job("PyTorchJob", "again", specs), namespace)
    cluster.apply(job("PyTorchJob", "once", specs | {"Worker": replica("pytorch", restartPolicy="Never")}), namespace)
    for name in ("again", "once"):
        eventually(functools.partial(running, cluster, name, namespace), what=f"{name} Running")
    first = fail_pod(cluster, namespace, "again-worker-0", 1)
    fail_pod(cluster, namespace, "once-worker-0", 1)

    def replaced() -> bool:
        pod = (
            cluster.get("pod", "again-worker-0", namespace)
            if "again-worker-0" in cluster.names("pods", namespace)
            else {}
        )
        return bool(pod) and pod["metadata"]["uid"] != first and pod.get("status", {}).get("phase") == "Running"

    assert eventually(replaced, what="again-worker-0 replaced")
    # Restarting while the replacement starts (the Trainer's phase), then Running again, never Failed.
    assert eventually(functools.partial(running, cluster, "again", namespace), what="again Running again")
    types = [c["type"] for c in cluster.get("pytorchjob", "again", namespace)["status"]["conditions"]]
    assert "Failed" not in types, types
    restarts = cluster.get("trainer", "again", namespace)["status"]["topology"]["replicas"]["worker"]["restarts"]
    assert restarts == 1
    failed = eventually(lambda: failed_condition(cluster, "pytorchjob", "once", namespace), what="once Failed")
    assert failed["reason"] == "PyTorchJobFailed"
    assert "once-worker-0" in failed["message"], failed


def test_backoff_limit_and_active_deadline_end_a_job(cluster: Cluster, namespace: str) -> None:
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch", restartPolicy="OnFailure")}
    cluster.apply(job("PyTorchJob", "no-retries", specs, runPolicy={"backoffLimit": 0}), namespace)
    past = {"activeDeadlineSeconds": 3, "cleanPodPolicy": "Running"}  # None (the default) would keep its pods
    cluster.apply(job("PyTorchJob", "deadline", specs, runPolicy=past), namespace)
    eventually(lambda: state(cluster, "pytorchjobs", "no-retries", namespace) == "Running", what="Running")
    fail_pod(cluster, namespace, "no-retries-worker-0", 1)
    for name in ("no-retries", "deadline"):
        failed = eventually(functools.partial(failed_condition, cluster, "pytorchjob", name, namespace), what=name)
        assert failed["message"].startswith(f"PyTorchJob {namespace}/{name} is failed: "), failed
    deadline = failed_condition(cluster, "pytorchjob", "deadline", namespace) or {}
    assert "activeDeadlineSeconds" in deadline["message"], deadline
    stopped = {"deadline-master-0", "deadline-worker-0"}
    assert eventually(lambda: not stopped & cluster.names("pods", namespace), what="its running pods deleted")


@pytest.mark.parametrize(("policy", "left"), [("All", set()), ("None", {"{name}-master-0", "{name}-worker-0"})])
def test_clean_pod_policy_says_which_pods_outlive_the_job(
    cluster: Cluster, namespace: str, policy: str, left: set[str]
) -> None:
    name = f"clean-{policy.lower()}"
    specs = {"Master": replica("pytorch", succeed_after="2s"), "Worker": replica("pytorch", succeed_after="2s")}
    cluster.apply(job("PyTorchJob", name, specs, runPolicy={"cleanPodPolicy": policy}), namespace)
    assert eventually(lambda: state(cluster, "pytorchjobs", name, namespace) == "Succeeded", what="Succeeded")
    expected = {p.format(name=name) for p in left}
    assert eventually(lambda: cluster.names("pods", namespace) == expected, what=f"pods left: {sorted(expected)}")
