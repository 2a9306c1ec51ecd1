"""Two replicas of a controller are safe: kopf peering lets only the higher-priority one work,
and the other takes over when it dies."""

import json
import os
import signal
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import REPO, Cluster, eventually, read_metric
from trainerop_common.api import GROUP
from trainerop_common.kopf_settings import peering_priority

SEED_TRAINER = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
RECONCILES = "operator_reconcile_duration_seconds_count"
OK = {"controller": "quota", "kind": "Trainer", "result": "ok"}


class Replicas:
    def __init__(self, cluster: Cluster, run: Path) -> None:
        self.cluster, self.run = cluster, run
        (run / "logs").mkdir()
        (run / "pids").mkdir()

    def start(
        self, name: str, priority: int, port: int, webhook_port: int = 0, pod: str = "", lifetime: int = 5
    ) -> None:
        """A quota replica; ``priority`` 0: the one its ``pod`` name gives (as deployed)."""
        cert, key = localdev.webhook_certificate()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.sa_kubeconfigs["quota"]),
            "POD_NAME": pod or name,
            "TRAINEROP_METRICS_ADDRESS": "127.0.0.1",
            "TRAINEROP_METRICS_PORT": str(port),
            "TRAINEROP_PEERING": "true",
            "TRAINEROP_PEERING_PRIORITY": str(priority),
            "TRAINEROP_PEERING_LIFETIME": str(lifetime),
            "TRAINEROP_WEBHOOK_ADDRESS": "127.0.0.1",
            "TRAINEROP_WEBHOOK_PORT": str(webhook_port),
            "TRAINEROP_WEBHOOK_CERT_FILE": str(cert),
            "TRAINEROP_WEBHOOK_KEY_FILE": str(key),
        }
        comp = cluster_tool.Component(name, [localdev.executable("quota")], localdev.ready_check(port))
        cluster_tool.start(self.run, comp, env=env)

    def log(self, name: str) -> str:
        return (self.run / "logs" / f"{name}.log").read_text(errors="replace")

    def stop(self, *names: str) -> None:
        cluster_tool.stop_processes(self.run, list(names))

    def kill_9(self, name: str) -> None:
        """SIGKILL, as the kernel's OOM killer or a node failure ends a process: no cleanup."""
        pid = cluster_tool.running_pid(self.run, name)
        assert pid is not None, f"{name} is not running"
        os.kill(pid, signal.SIGKILL)


def admission_review(port: int) -> dict[str, Any] | None:
    """An AdmissionReview of a Trainer with a priority class sent to a quota replica's webhook."""
    trainer = {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "scheduling": {"priorityClassName": "urgent"}}}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "peering-test",
            "kind": {"group": GROUP, "version": "v1alpha1", "kind": "Trainer"},
            "resource": {"group": GROUP, "version": "v1alpha1", "resource": "trainers"},
            "operation": "CREATE",
            "namespace": "default",
            "name": "reviewed",
            "userInfo": {"username": "someone"},
            "object": {**trainer, "metadata": {"name": "reviewed", "namespace": "default"}},
        },
    }
    context = ssl.create_default_context(cafile=str(cluster_tool.RUN_DIR / "pki" / "ca.crt"))
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/validate-scheduling",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except OSError:
        return None  # not listening yet
    return answer


@pytest.fixture
def replicas(cluster: Cluster, tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(cluster, tmp_path)
    yield r
    r.stop("leader", "standby")


@pytest.mark.parametrize("ending", ["SIGTERM", "SIGKILL"])
def test_only_the_leader_works_and_the_standby_takes_over(
    cluster: Cluster, namespace: str, replicas: Replicas, ending: str, record_property: Callable[[str, object], None]
) -> None:
    leader_port, standby_port = cluster_tool.PORT_BASE + 30, cluster_tool.PORT_BASE + 31
    replicas.start("leader", priority=200, port=leader_port)
    replicas.start("standby", priority=100, port=standby_port, webhook_port=cluster_tool.PORT_BASE + 39)
    # kopf starts a peered replica paused and resumes it once no live peer outranks it.
    eventually(lambda: "Resuming operations" in replicas.log("leader"), what="the leader to start working")
    # The paused standby still answers admission reviews (peering pauses only the reconciling).
    review = eventually(lambda: admission_review(cluster_tool.PORT_BASE + 39), what="the standby's webhook")
    assert review["response"]["allowed"] is True  # no QuotaPolicy governs "default": only a warning
    assert "spec.scheduling has no effect" in " ".join(review["response"]["warnings"])

    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: read_metric(leader_port, RECONCILES, OK) > 0, what="the leader to reconcile")
    assert read_metric(standby_port, RECONCILES, OK) == 0
    peering = cluster.get("clusterkopfpeering", "trainer-operator-quota")
    assert sorted(p["priority"] for p in peering["status"].values()) == [100, 200]

    ended = time.monotonic()
    if ending == "SIGTERM":
        replicas.stop("leader")
    else:
        replicas.kill_9("leader")
    eventually(lambda: "Resuming operations" in replicas.log("standby"), timeout=90, what="the standby to resume")
    # Reported, not asserted (docs/failure-modes.md): a killed leader's peering record must expire
    # (lifetime 5 s here) before the standby resumes; a stopped one withdraws it.
    takeover = round(time.monotonic() - ended, 1)
    record_property("takeover_seconds", takeover)
    print(f"takeover after {ending}: {takeover} s")
    cluster.kubectl("label", "trainer", SEED_TRAINER["metadata"]["name"], "-n", namespace, "failover=1")
    eventually(lambda: read_metric(standby_port, RECONCILES, OK) > 0, what="the standby to reconcile")


def test_a_replica_killed_and_restarted_in_its_pod_works_again_without_waiting_out_its_lifetime(
    cluster: Cluster, namespace: str, replicas: Replicas
) -> None:
    """As the kubelet restarts a killed container: the same pod, so the same peering identity and
    priority (kopf_settings.peering_priority). Its last record is its own, not a live peer's that
    outranks it, so it does not wait the shipped lifetime (60 s) for that record to expire."""
    port, pod = cluster_tool.PORT_BASE + 30, "trainer-operator-quota-5f7c9d-x2k4p"
    replicas.start("leader", priority=0, port=port, pod=pod, lifetime=60)
    eventually(lambda: "Resuming operations" in replicas.log("leader"), what="the replica to start working")
    replicas.kill_9("leader")
    replicas.start("leader", priority=0, port=port, pod=pod, lifetime=60)
    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: read_metric(port, RECONCILES, OK) > 0, timeout=30, what="the restarted replica to reconcile")
    assert "Pausing operations" not in replicas.log("leader")
    peering = cluster.get("clusterkopfpeering", "trainer-operator-quota")
    assert peering["status"][pod]["priority"] == peering_priority(pod)  # one record, the pod's, kept across the kill
