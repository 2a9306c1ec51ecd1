"""Two replicas of a controller are safe: kopf peering lets only the higher-priority one work,
and the other takes over when it dies."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hack import cluster as cluster_tool
from hack import localdev

from tests.harness import REPO, Cluster, eventually, read_metric

SEED_TRAINER = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
RECONCILES = "operator_reconcile_duration_seconds_count"
OK = {"controller": "quota", "kind": "Trainer", "result": "ok"}


class Replicas:
    def __init__(self, cluster: Cluster, run: Path) -> None:
        self.cluster, self.run = cluster, run
        (run / "logs").mkdir()
        (run / "pids").mkdir()

    def start(self, name: str, priority: int, port: int) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.sa_kubeconfigs["quota"]),
            "TRAINEROP_METRICS_ADDRESS": "127.0.0.1",
            "TRAINEROP_METRICS_PORT": str(port),
            "TRAINEROP_PEERING": "true",
            "TRAINEROP_PEERING_PRIORITY": str(priority),
            "TRAINEROP_PEERING_LIFETIME": "5",
        }
        comp = cluster_tool.Component(name, [localdev.executable("quota")], localdev.ready_check(port))
        cluster_tool.start(self.run, comp, env=env)

    def log(self, name: str) -> str:
        return (self.run / "logs" / f"{name}.log").read_text(errors="replace")

    def stop(self, *names: str) -> None:
        cluster_tool.stop_processes(self.run, list(names))


@pytest.fixture
def replicas(cluster: Cluster, tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(cluster, tmp_path)
    yield r
    r.stop("leader", "standby")


def test_only_the_leader_works_and_the_standby_takes_over(cluster: Cluster, namespace: str, replicas: Replicas) -> None:
    leader_port, standby_port = cluster_tool.PORT_BASE + 30, cluster_tool.PORT_BASE + 31
    replicas.start("leader", priority=200, port=leader_port)
    replicas.start("standby", priority=100, port=standby_port)
    # kopf starts a peered replica paused and resumes it once no live peer outranks it.
    eventually(lambda: "Resuming operations" in replicas.log("leader"), what="the leader to start working")

    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: read_metric(leader_port, RECONCILES, OK) > 0, what="the leader to reconcile")
    assert read_metric(standby_port, RECONCILES, OK) == 0
    peering = cluster.get("clusterkopfpeering", "trainer-operator-quota")
    assert sorted(p["priority"] for p in peering["status"].values()) == [100, 200]

    replicas.stop("leader")
    eventually(lambda: "Resuming operations" in replicas.log("standby"), timeout=90, what="the standby to resume")
    cluster.kubectl("label", "trainer", SEED_TRAINER["metadata"]["name"], "-n", namespace, "failover=1")
    eventually(lambda: read_metric(standby_port, RECONCILES, OK) > 0, what="the standby to reconcile")
