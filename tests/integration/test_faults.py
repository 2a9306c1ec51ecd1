"""Faults (issue 20): controllers killed with SIGKILL, as production kills them, and status writes
refused, lose nothing: every Trainer ends with its pods, no rank runs twice, every failure is
counted exactly once (docs/failure-modes.md)."""

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import deploy, localdev
from tests.factories import trainer_manifest
from tests.harness import Cluster, KubectlError, eventually
from tests.integration.test_trainer_pods import fail_pod
from trainerop_common.names import service_account_user

TYPE = "trainer.operator.kubeflow.org/replica-type"
INDEX = "trainer.operator.kubeflow.org/replica-index"


def kill_9(controller: str) -> float:
    """SIGKILL the controller (no cleanup, no lease released), then start it again as its
    Deployment would; returns the kill's time."""
    pid = cluster_tool.running_pid(localdev.state_dir(), f"controller-{controller}")
    assert pid is not None, f"controller {controller} is not running"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    # (a killed child of this process stays a zombie until reaped: running_pid sees it gone)
    eventually(
        lambda: cluster_tool.running_pid(localdev.state_dir(), f"controller-{controller}") is None,
        timeout=10,
        what=f"{controller} to die",
    )
    localdev.start()  # starts whichever controller is not running
    return killed


def report(record: Callable[[str, object], None], what: str, seconds: float) -> None:
    """A figure for docs/failure-modes.md: reported (JUnit property and stdout), never asserted."""
    record(what, round(seconds, 1))
    print(f"{what}: {seconds:.1f} s")


def live_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ranks(pods: list[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """(Trainer, role, index) of every pod: each must appear once."""
    return Counter(
        (p["metadata"]["labels"]["trainer-name"], p["metadata"]["labels"][TYPE], p["metadata"]["labels"][INDEX])
        for p in pods
    )


def trainers(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return list(json.loads(cluster.kubectl("get", "trainers", "-n", namespace, "-o", "json"))["items"])


def all_running(cluster: Cluster, namespace: str, count: int) -> list[dict[str, Any]] | None:
    found = trainers(cluster, namespace)
    running = [t for t in found if t.get("status", {}).get("phase") == "Running"]
    return found if len(running) == count else None


# The controllers Trainers wait for; the kubeflow controller's kill is tested with jobs (test_kubeflow).
TRAINER_CONTROLLERS = tuple(c for c in localdev.CONTROLLERS if c != "kubeflow")


@pytest.mark.parametrize("controller", TRAINER_CONTROLLERS)
def test_a_controller_killed_in_a_burst_of_100_trainers_leaves_each_with_its_pods_once(
    cluster: Cluster, namespace: str, controller: str, record_property: Callable[[str, object], None]
) -> None:
    count = 100
    burst = [
        trainer_manifest(f"b{i:03d}", namespace=namespace, epochs=1, image="bench:latest", topology={"workers": 1})
        for i in range(count)
    ]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": burst}))
    eventually(lambda: len(live_pods(cluster, namespace)) >= 10, timeout=120, what="the burst's first pods")
    killed = kill_9(controller)
    found = eventually(lambda: all_running(cluster, namespace, count), timeout=300, what="all 100 Trainers Running")
    report(record_property, f"kill -9 of {controller} in a burst: all Running", time.monotonic() - killed)
    pods = live_pods(cluster, namespace)
    assert len(pods) == count  # no Trainer without its pod, none with two
    assert max(ranks(pods).values()) == 1
    assert not [t["metadata"]["name"] for t in found if t["status"]["topology"]["replicas"]["worker"]["restarts"]]


@contextmanager
def refusing_status_writes(cluster: Cluster, namespace: str) -> Iterator[None]:
    """While active, the API server refuses the trainer controller's status writes in this
    namespace (a ValidatingAdmissionPolicy): as if it died after acting and before writing."""
    name = f"test-refuse-trainer-status-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["trainer.operator.kubeflow.org"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["trainers/status"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "the-trainer-controller",
                    "expression": f"request.userInfo.username == '{service_account_user('trainer')}'",
                }
            ],
            "validations": [{"expression": "false", "message": "refused by the fault test"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": [policy, binding]})
    try:
        yield
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found")
        cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found")


def refused(cluster: Cluster, namespace: str, trainer: str) -> bool:
    """Whether a status write by the trainer controller is refused now (the policy is in force)."""
    patch = json.dumps({"status": {"phase": "Running"}})
    try:
        cluster.kubectl(
            "patch",
            "trainer",
            trainer,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
            "--dry-run=server",
            as_controller="trainer",
        )
    except KubectlError as err:  # the refusal is what is looked for
        return "refused by the fault test" in str(err)
    return False


def said(cluster: Cluster, namespace: str, reason: str, text: str) -> bool:
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return any(e["reason"] == reason and text in e["message"] for e in events)


def test_a_failed_pod_stays_until_the_status_counting_its_failure_is_written(cluster: Cluster, namespace: str) -> None:
    cluster.apply(trainer_manifest("g", epochs=1, image="bench:latest", topology={"workers": 2}), namespace)
    eventually(lambda: all_running(cluster, namespace, 1), what="the run to be Running")
    with refusing_status_writes(cluster, namespace):
        eventually(lambda: refused(cluster, namespace, "g"), timeout=30, what="the policy to be in force")
        uid = fail_pod(cluster, namespace, "g-worker-0", 137)
        # The trainer has decided the restart (its Event is posted before the status write) ...
        eventually(lambda: said(cluster, namespace, "RestartingPod", "g-worker-0"), what="the restart to be decided")
        pod = cluster.get("pod", "g-worker-0", namespace)
        # ... but the failed pod stays until a write counts its failure.
        assert pod["metadata"]["uid"] == uid
        assert not pod["metadata"].get("deletionTimestamp")

    def replaced() -> dict[str, Any] | None:
        # The pod first: its replacement comes after the status that counts the failure, so a
        # Trainer read after it says what that write said (read before, it may predate the write).
        new = cluster.get("pod", "g-worker-0", namespace)["metadata"]["uid"] != uid
        obj = trainers(cluster, namespace)[0]
        return obj if new and obj["status"].get("phase") == "Running" else None

    obj = eventually(replaced, timeout=120, what="the failed pod replaced once the writes are allowed again")
    assert obj["status"]["topology"]["replicas"]["worker"]["restarts"] == 1


def test_the_trainer_killed_during_gang_restarts_counts_each_failure_once(
    cluster: Cluster, namespace: str, record_property: Callable[[str, object], None]
) -> None:
    workers = 8
    cluster.apply(
        trainer_manifest(
            "gang",
            epochs=1,
            image="bench:latest",
            topology={"workers": workers},
            runPolicy={"restartScope": "Gang", "backoffLimit": 100},
        ),
        namespace,
    )
    eventually(lambda: all_running(cluster, namespace, 1), what="the gang to be Running")
    for round_, delay in enumerate((0.0, 0.05, 0.3), start=1):
        uid = fail_pod(cluster, namespace, "gang-worker-3", 137)

        def failed(uid: str = uid) -> bool:
            pod = cluster.get("pod", "gang-worker-3", namespace)
            return bool(pod["status"].get("phase") == "Failed" or pod["metadata"]["uid"] != uid)

        eventually(failed, timeout=30, what="the failure")
        time.sleep(delay)  # kill at different moments of the trainer's reaction
        killed = kill_9("trainer")

        def recovered() -> list[dict[str, Any]] | None:
            pods = live_pods(cluster, namespace)
            done = len(pods) == workers and all(p["status"].get("phase") == "Running" for p in pods)
            return pods if done and all_running(cluster, namespace, 1) else None

        pods = eventually(recovered, timeout=120, what=f"the gang back after round {round_}")
        report(
            record_property, f"trainer killed {delay} s into a gang restart: gang Running", time.monotonic() - killed
        )
        assert max(ranks(pods).values()) == 1
        restarts = trainers(cluster, namespace)[0]["status"]["topology"]["replicas"]["worker"]["restarts"]
        assert restarts == round_, f"after {round_} failures the status counts {restarts}"


def only_where_the_api_server_may_restart() -> None:
    """A test that restarts the API server runs on the local cluster the session started (CI's),
    never on a cluster named in $KUBECONFIG: skipped there, saying so."""
    if not deploy.local_cluster():
        pytest.skip("restarts the API server: only on the local cluster the session started (CI's)")


def test_what_is_deleted_while_a_watch_is_away_is_not_kept_after_the_relist(
    cluster: Cluster, namespace: str, record_property: Callable[[str, object], None]
) -> None:
    """The trainer controller frozen (SIGSTOP) while the API server restarts, a pod and a Trainer are
    deleted and etcd is compacted: its watches resume from compacted versions (410 Gone) and kopf
    lists again, reporting only what exists. Its cache must drop the deleted pod (else the replica counts
    as present and is never replaced) and it must forget the deleted Trainer."""
    only_where_the_api_server_may_restart()
    cluster.apply(trainer_manifest("w", epochs=1, image="bench:latest", topology={"workers": 2}), namespace)
    cluster.apply(trainer_manifest("doomed", epochs=1, image="bench:latest", topology={"workers": 1}), namespace)
    eventually(lambda: all_running(cluster, namespace, 2), what="both runs Running")
    old = cluster.get("pod", "w-worker-1", namespace)["metadata"]["uid"]
    pid = cluster_tool.running_pid(localdev.state_dir(), "controller-trainer")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        # The restart first: the frozen process's connections end with nothing more in them (a
        # deletion's event sent before would wait in its socket and be read after SIGCONT).
        cluster_tool.restart("kube-apiserver")
        cluster.kubectl("delete", "pod", "w-worker-1", "-n", namespace, "--grace-period=0", "--force")
        cluster.kubectl("delete", "trainer", "doomed", "-n", namespace)
        cluster_tool.compact_etcd()
    finally:
        os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()

    def replaced() -> bool:
        pods = {p["metadata"]["name"]: p for p in live_pods(cluster, namespace)}
        return "w-worker-1" in pods and pods["w-worker-1"]["metadata"]["uid"] != old

    eventually(replaced, timeout=60, what="the pod deleted in the watch's gap to be created again")
    report(record_property, "watch gap (410 Gone): the pod deleted meanwhile replaced", time.monotonic() - resumed)

    def known() -> bool:
        watched = cluster.metric("trainer", "operator_watched_objects", {"controller": "trainer", "kind": "Trainer"})
        return watched == len(json.loads(cluster.kubectl("get", "trainers", "-A", "-o", "json"))["items"])

    eventually(known, timeout=60, what="the trainer controller to forget the Trainer deleted in the gap")


def test_with_a_webhook_down_a_create_is_refused_naming_it_and_nothing_is_created(
    cluster: Cluster, namespace: str
) -> None:
    """The trainer controller's webhook (failurePolicy Fail) unreachable: the API server refuses the
    create with a message naming the webhook, and no Trainer exists; the production overlay's second
    replica and PodDisruptionBudget are what keep this from happening (docs/failure-modes.md)."""
    cluster_tool.stop_processes(localdev.state_dir(), ["controller-trainer"])
    try:
        with pytest.raises(KubectlError) as refused:
            cluster.apply(trainer_manifest("unserved", epochs=1, image="bench:latest"), namespace)
        message = str(refused.value)
        assert 'failed calling webhook "validate-trainer.trainer.operator.kubeflow.org"' in message
        assert "connection refused" in message
        assert "unserved" not in cluster.names("trainers", namespace)
    finally:
        localdev.start()
    cluster.apply(trainer_manifest("unserved", epochs=1, image="bench:latest"), namespace)  # served again
