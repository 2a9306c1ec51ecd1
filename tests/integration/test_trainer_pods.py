"""The trainer controller turns a Trainer into pods and Services on kwok nodes (issue 3)."""

import json
from typing import Any

import pytest
import yaml

from testbed import cluster as cluster_tool
from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, condition, eventually

SEED_TRAINER: dict[str, Any] = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
NAME = SEED_TRAINER["metadata"]["name"]
TYPE = "trainer.operator.kubeflow.org/replica-type"


def pods(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    listed = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", f"trainer-name={NAME}", "-o", "json"))
    return {p["metadata"]["name"]: p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")}


def trainer(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return cluster.get("trainer", NAME, namespace)


def running(cluster: Cluster, namespace: str, workers: int) -> dict[str, Any] | None:
    obj = trainer(cluster, namespace)
    topology = obj.get("status", {}).get("topology", {})
    ok = obj.get("status", {}).get("phase") == "Running" and topology.get("readyWorkers") == workers
    return obj if ok else None


def endpoint_hostnames(cluster: Cluster, namespace: str, service: str) -> set[str]:
    selector = f"kubernetes.io/service-name={service}"
    slices = json.loads(cluster.kubectl("get", "endpointslices", "-n", namespace, "-l", selector, "-o", "json"))
    return {e.get("hostname", "") for s in slices["items"] for e in s.get("endpoints") or ()}


def test_seed_trainer_gets_four_workers_and_a_parameter_server(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_TRAINER, namespace)
    obj = eventually(lambda: running(cluster, namespace, 4), what="the seed run to be Running on kwok nodes")

    found = pods(cluster, namespace)
    assert sorted(found) == [f"{NAME}-ps-0", *(f"{NAME}-worker-{i}" for i in range(4))]
    for name, pod in found.items():
        labels = pod["metadata"]["labels"]
        assert labels["trainer-name"] == NAME
        assert name.startswith(f"{NAME}-{labels[TYPE]}-")
        assert pod["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["EPOCHS"] == "10"
        assert env["CHECKPOINT_DIR"] == f"/checkpoints/{NAME}"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert pod["spec"]["nodeName"].startswith("kwok-gpu-")
    services = json.loads(cluster.kubectl("get", "services", "-n", namespace, "-o", "json"))["items"]
    assert [(s["metadata"]["name"], s["spec"]["clusterIP"]) for s in services] == [(NAME, "None")]
    assert {(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in found.values()} == {(n, NAME) for n in found}
    # What DNS answers <pod>.<trainer> from: the Service's endpoints, each pod under its hostname.
    eventually(lambda: endpoint_hostnames(cluster, namespace, NAME) == set(found), what="every replica's endpoint")

    status = obj["status"]
    assert status["topology"]["replicas"]["worker"] == {
        "desired": 4,
        "active": 4,
        "ready": 4,
        "succeeded": 0,
        "failed": 0,
        "restarts": 0,
        "recentFailures": 0,
    }
    assert status["progress"]["startTime"]
    assert condition(obj, "Running")["status"] == "True"
    # The seed README's query works as written.
    listed = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"trainer-name={NAME}", "-o", "name").split()
    assert len(listed) == 5


def test_scaling_4_to_6_to_3_leaves_untouched_pods_untouched(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: running(cluster, namespace, 4), what="4 running workers")
    before = {n: p["metadata"]["uid"] for n, p in pods(cluster, namespace).items()}

    cluster.kubectl("scale", "trainer", NAME, "-n", namespace, "--replicas=6")
    eventually(lambda: running(cluster, namespace, 6), what="6 running workers")
    after_up = {n: p["metadata"]["uid"] for n, p in pods(cluster, namespace).items()}
    assert {n: after_up[n] for n in before} == before
    assert set(after_up) - set(before) == {f"{NAME}-worker-4", f"{NAME}-worker-5"}

    cluster.kubectl("scale", "trainer", NAME, "-n", namespace, "--replicas=3")
    eventually(lambda: len([n for n in pods(cluster, namespace) if "-worker-" in n]) == 3, what="3 workers")
    after_down = {n: p["metadata"]["uid"] for n, p in pods(cluster, namespace).items()}
    assert after_down == {n: before[n] for n in (f"{NAME}-ps-0", *(f"{NAME}-worker-{i}" for i in range(3)))}
    eventually(lambda: running(cluster, namespace, 3), what="the status to count 3 workers")


SIM = "sim.trainer.operator.kubeflow.org"


def fail_pod(cluster: Cluster, namespace: str, name: str, exit_code: int) -> str:
    """Ask kwok (the pod's node) to fail the pod's container with ``exit_code``; returns its UID."""
    pod = cluster.get("pod", name, namespace)
    cluster.kubectl("annotate", "pod", name, "-n", namespace, f"{SIM}/fail-after=100ms", f"{SIM}/exit-code={exit_code}")
    return str(pod["metadata"]["uid"])


def test_a_retryable_failure_is_replaced_under_the_same_name(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "runPolicy": {"restartPolicy": "ExitCode"}}}, namespace
    )
    eventually(lambda: running(cluster, namespace, 4), what="4 running workers")
    victim = f"{NAME}-worker-2"
    old_uid = fail_pod(cluster, namespace, victim, 137)

    def replaced() -> dict[str, Any] | None:
        pod = pods(cluster, namespace).get(victim)
        return pod if pod and pod["metadata"]["uid"] != old_uid else None

    eventually(replaced, what="a new pod with the same name")
    obj = eventually(lambda: running(cluster, namespace, 4), what="the run to be Running again")
    assert obj["status"]["topology"]["replicas"]["worker"]["restarts"] == 1
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    assert any(e["reason"] == "RestartingPod" and victim in e["message"] for e in events)


def test_a_permanent_failure_fails_the_trainer_naming_pod_and_exit_code(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "runPolicy": {"restartPolicy": "ExitCode"}}}, namespace
    )
    eventually(lambda: running(cluster, namespace, 4), what="4 running workers")
    fail_pod(cluster, namespace, f"{NAME}-worker-1", 3)
    obj = eventually(
        lambda: (o := trainer(cluster, namespace))["status"].get("phase") == "Failed" and o, what="the run to fail"
    )
    failed = condition(obj, "Failed")
    assert failed["reason"] == "PodFailed"
    assert f"pod {NAME}-worker-1 failed with exit code 3" in failed["message"]
    # cleanPodPolicy Running (the default) removes the pods that were still running.
    eventually(
        lambda: not [p for p in pods(cluster, namespace).values() if p["status"].get("phase") == "Running"],
        what="running pods to be cleaned up",
    )


@pytest.mark.smoke
def test_the_run_succeeds_when_its_workers_do(cluster: Cluster, namespace: str) -> None:
    spec = {
        **SEED_TRAINER["spec"],
        "podTemplateOverrides": {"worker": {"metadata": {"annotations": {f"{SIM}/succeed-after": "2s"}}}},
    }
    cluster.apply({**SEED_TRAINER, "spec": spec}, namespace)
    obj = eventually(
        lambda: (o := trainer(cluster, namespace))["status"].get("phase") == "Succeeded" and o,
        what="the run to succeed",
    )
    assert condition(obj, "Succeeded")["status"] == "True"
    assert obj["status"]["progress"]["completionTime"]
    assert obj["status"]["topology"]["replicas"]["worker"]["succeeded"] == 4
    # cleanPodPolicy Running: the parameter server, still running, is removed; finished workers stay.
    eventually(lambda: f"{NAME}-ps-0" not in pods(cluster, namespace), what="the parameter server to be removed")
    assert len(pods(cluster, namespace)) == 4


S3_PIN = "ab" * 32
MODELS = [
    (
        {"source": "hf://acme/llama@main", "cacheClaim": "models", "tokenSecret": "hub-token"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "HF_TOKEN"}}},
        "/models/hf/acme/llama/main",
    ),
    (
        {"source": f"s3://models/llama@sha256:{S3_PIN}", "cacheClaim": "models", "credentialsSecret": "s3-creds"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}}},
        f"/models/s3/models/llama/@{S3_PIN}",
    ),
]


@pytest.mark.parametrize(("model", "secret_env", "model_path"), MODELS, ids=["hub", "s3"])
def test_a_runs_model_is_fetched_by_an_init_container_the_api_server_and_its_policies_accept(
    cluster: Cluster, namespace: str, model: dict[str, str], secret_env: dict[str, Any], model_path: str
) -> None:
    """The pods of a run with spec.model pass the API server, the trainer's creations policy and
    Pod Security as the trainer makes them (kwok starts no container: the e2e tier runs the
    initializer, tests/e2e/test_models.py; tests/integration/test_model_s3.py runs it on S3)."""
    cluster.apply({**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "model": model}}, namespace)

    def five() -> dict[str, dict[str, Any]] | None:
        found = pods(cluster, namespace)
        return found if len(found) == 5 else None

    found = eventually(five, what="the run's five pods")
    for pod in found.values():
        init = pod["spec"]["initContainers"][0]
        assert init["name"] == "model-init"
        assert init["command"][:3] == ["trainerop-model-init", "--source", model["source"]]
        assert secret_env in init["env"]
        training = pod["spec"]["containers"][0]
        assert {"name": "model-cache", "mountPath": "/models", "readOnly": True} in training["volumeMounts"]
        assert {"name": "MODEL_PATH", "value": model_path} in training["env"]
    verified = eventually(lambda: condition(trainer(cluster, namespace), "ModelVerified"), what="ModelVerified")
    assert verified["reason"] in ("Fetching", "Verified")  # kwok may say the init container ended


def test_a_pod_on_a_deleted_node_is_replaced_elsewhere(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: running(cluster, namespace, 4), what="4 running workers")
    victim = f"{NAME}-worker-0"
    pod = pods(cluster, namespace)[victim]
    node, old_uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    try:
        cluster.kubectl("delete", "node", node, "--wait=false")  # a spot node reclaimed
        replacement = eventually(
            lambda: (
                (p := pods(cluster, namespace).get(victim))
                and p["metadata"]["uid"] != old_uid
                and p["spec"].get("nodeName")
                and p
            ),
            what="a replacement scheduled on another node",
        )
        assert replacement["spec"]["nodeName"] != node
        obj = eventually(lambda: running(cluster, namespace, 4), what="the run to be Running again")
        assert obj["status"]["topology"]["replicas"]["worker"]["restarts"] == 1
        events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
        assert any(e["reason"] == "RestartingPod" and f"lost with its node {node}" in e["message"] for e in events)
    finally:
        (spec,) = [n for n in cluster_tool.fake_nodes(cluster_tool.FAKE_NODES) if n["metadata"]["name"] == node]
        eventually(lambda: node not in cluster.names("nodes"), what="the node to be gone")
        cluster.apply(spec)
        cluster.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=60s")


def test_a_replacement_keeps_its_replicas_claim(cluster: Cluster, namespace: str) -> None:
    name = "stateful"
    # The local cluster has no provisioner: static volumes pre-bound to the claims to come.
    volumes = [f"{namespace}-{name}-{i}" for i in range(2)]
    for i, volume in enumerate(volumes):
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/{volume}"},
                    "claimRef": {"namespace": namespace, "name": f"{name}-worker-{i}-data"},
                },
            }
        )
    try:
        cluster.apply(
            trainer_manifest(name, topology={"workers": 2}, storage={"size": "1Gi", "storageClassName": ""}),
            namespace,
        )

        def running_pod(pod_name: str) -> dict[str, Any] | None:
            pod = cluster.get("pod", pod_name, namespace)
            return pod if pod["status"].get("phase") == "Running" else None

        victim = f"{name}-worker-1"
        old = eventually(lambda: running_pod(victim), what="the worker to run with its claim")
        claim = cluster.get("pvc", f"{victim}-data", namespace)
        assert claim["status"]["phase"] == "Bound"
        fail_pod(cluster, namespace, victim, 137)
        new = eventually(
            lambda: (p := running_pod(victim)) and p["metadata"]["uid"] != old["metadata"]["uid"] and p,
            what="the replacement to run",
        )
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in new["spec"]["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claims == [f"{victim}-data"]
        assert cluster.get("pvc", f"{victim}-data", namespace)["metadata"]["uid"] == claim["metadata"]["uid"]
    finally:
        cluster.kubectl("delete", "trainer", name, "-n", namespace, "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", "pv", *volumes, "--ignore-not-found", "--wait=false")


def uids(cluster: Cluster, namespace: str) -> dict[str, str]:
    return {n: p["metadata"]["uid"] for n, p in pods(cluster, namespace).items()}


def with_policy(**run_policy: Any) -> dict[str, Any]:
    return {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "runPolicy": run_policy}}


def gang_with_a_failed(cluster: Cluster, namespace: str, pod: str) -> dict[str, str]:
    """A running gang-scope run in which ``pod`` is then failed; the pods' UIDs before."""
    cluster.apply(with_policy(restartScope="Gang"), namespace)
    eventually(lambda: running(cluster, namespace, 4), what="4 running workers")
    before = uids(cluster, namespace)
    fail_pod(cluster, namespace, f"{NAME}-{pod}", 137)
    return before


def test_gang_scope_restarts_every_worker_and_keeps_the_parameter_server(cluster: Cluster, namespace: str) -> None:
    before = gang_with_a_failed(cluster, namespace, "worker-1")

    def all_workers_replaced() -> dict[str, str] | None:
        now = uids(cluster, namespace)
        workers = [n for n in before if "-worker-" in n]
        return now if len(now) == 5 and all(now.get(n) not in (None, before[n]) for n in workers) else None

    after = eventually(all_workers_replaced, what="every worker to be replaced")
    assert after[f"{NAME}-ps-0"] == before[f"{NAME}-ps-0"]
    eventually(lambda: running(cluster, namespace, 4), what="the gang to run again")


def test_a_parameter_server_restart_leaves_the_workers_running(cluster: Cluster, namespace: str) -> None:
    before = gang_with_a_failed(cluster, namespace, "ps-0")

    def ps_replaced() -> dict[str, str] | None:
        now = uids(cluster, namespace)
        return now if now.get(f"{NAME}-ps-0") not in (None, before[f"{NAME}-ps-0"]) else None

    after = eventually(ps_replaced, what="the parameter server to be replaced")
    assert {n: u for n, u in after.items() if "-worker-" in n} == {n: u for n, u in before.items() if "-worker-" in n}
    obj = eventually(lambda: running(cluster, namespace, 4), what="the run to be Running")
    assert obj["status"]["topology"]["replicas"]["ps"]["restarts"] == 1
    assert obj["status"]["topology"]["replicas"]["worker"]["restarts"] == 0


def test_active_deadline_fails_the_run(cluster: Cluster, namespace: str) -> None:
    cluster.apply(with_policy(activeDeadlineSeconds=3), namespace)
    obj = eventually(
        lambda: (o := trainer(cluster, namespace))["status"].get("phase") == "Failed" and o, what="the deadline"
    )
    assert condition(obj, "Failed")["reason"] == "DeadlineExceeded"


def test_ttl_after_finished_deletes_the_trainer(cluster: Cluster, namespace: str) -> None:
    spec = {
        **SEED_TRAINER["spec"],
        "runPolicy": {"ttlSecondsAfterFinished": 2},
        "podTemplateOverrides": {"worker": {"metadata": {"annotations": {f"{SIM}/succeed-after": "1s"}}}},
    }
    cluster.apply({**SEED_TRAINER, "spec": spec}, namespace)
    eventually(lambda: trainer(cluster, namespace)["status"].get("phase") == "Succeeded", what="success")
    eventually(
        lambda: NAME not in cluster.names("trainers", namespace),
        what="the Trainer to be deleted after its TTL",
    )
    # Posted by a reconcile its own TTL timer started (outside kopf's handler context).
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    assert any(e["reason"] == "TTLExpired" for e in events)


def test_a_users_service_of_the_trainers_name_is_reported_and_the_run_starts_once_it_is_gone(
    cluster: Cluster, namespace: str
) -> None:
    """The replicas' DNS names resolve through a Service of the Trainer's name: one of a user's
    in the way is not taken as the Trainer's (its pods would never find each other); the Trainer's
    own comes once it is gone (the refused create is retried with backoff)."""
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]},
    }
    cluster.apply(theirs, namespace)
    cluster.apply(SEED_TRAINER, namespace)

    def warned() -> list[dict[str, Any]] | None:
        listed = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
        found = [e for e in listed if e["reason"] == "CreateRefused" and f"Service {NAME} exists" in e["message"]]
        return found or None

    (event, *_) = eventually(warned, what="a Warning Event naming the Service in the way")
    assert event["type"] == "Warning"
    assert "rename or delete that Service" in event["message"]
    cluster.kubectl("delete", "service", NAME, "-n", namespace)

    def ours() -> dict[str, Any] | None:
        listed = json.loads(cluster.kubectl("get", "services", "-n", namespace, "-o", "json"))["items"]
        return next((s for s in listed if s["metadata"].get("ownerReferences")), None)

    service = eventually(ours, timeout=90, what="the Trainer's own Service once the user's is gone")
    assert service["metadata"]["ownerReferences"][0]["uid"] == trainer(cluster, namespace)["metadata"]["uid"]
    assert service["spec"]["clusterIP"] == "None"
    eventually(lambda: running(cluster, namespace, 4), what="the run Running")
