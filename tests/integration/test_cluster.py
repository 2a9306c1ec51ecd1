"""The local cluster is made of real upstream components and behaves like one."""

import json
import subprocess
import sys
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import versions
from tests.harness import REPO, Cluster, eventually


@pytest.mark.smoke
def test_server_is_the_pinned_upstream_version(cluster: Cluster) -> None:
    """The test bed's version, or the one testbed.versions asked for (TRAINER_OPERATOR_K8S_VERSION)."""
    version = json.loads(cluster.kubectl("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == versions.selected()
    assert version["clientVersion"]["gitVersion"] == versions.selected()


def test_fake_gpu_nodes_carry_capacity_and_placement_labels(cluster: Cluster) -> None:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json"))["items"]
    assert len(nodes) >= 4
    capacity_types = {n["metadata"]["labels"]["trainer.operator.kubeflow.org/capacity-type"] for n in nodes}
    assert capacity_types == {"spot", "on-demand"}
    assert len({n["metadata"]["labels"]["trainer.operator.kubeflow.org/nvlink-domain"] for n in nodes}) >= 2
    for node in nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"


def test_the_real_scheduler_binds_a_gpu_pod_to_a_kwok_node(cluster: Cluster, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-probe"},
        "spec": {
            "nodeSelector": {"trainer.operator.kubeflow.org/capacity-type": "spot"},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "none", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
    }
    cluster.apply(pod, namespace)

    def running() -> dict[str, Any] | None:
        got = cluster.get("pod", "gpu-probe", namespace)
        return got if got["status"].get("phase") == "Running" else None

    got = eventually(running, what="the pod to be scheduled and run by kwok")
    node = cluster.get("node", got["spec"]["nodeName"])
    assert node["metadata"]["labels"]["trainer.operator.kubeflow.org/capacity-type"] == "spot"


def test_kwok_finishes_a_deletion_but_never_deletes_a_pod_whose_deletion_has_not_begun(
    cluster: Cluster, namespace: str
) -> None:
    """kwok deletes pods by name, without the kubelet's UID precondition; the testbed's admission
    policy (testbed/kwok-deletes.yaml) refuses it a pod whose deletion has not begun, so a late
    delete of a pod already gone cannot take its replacement of the same name."""
    kwok_config = cluster_tool.RUN_DIR / "kwok.kubeconfig"
    if not kwok_config.is_file():
        pytest.skip("the session uses the cluster in $KUBECONFIG, not one testbed.cluster started")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "replacement"},
        "spec": {
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "none"}],
        },
    }
    cluster.apply(pod, namespace)
    eventually(lambda: cluster.get("pod", "replacement", namespace)["status"].get("phase") == "Running")
    as_kwok = subprocess.run(
        [str(cluster.kubectl_bin), f"--kubeconfig={kwok_config}", "delete", "pod", "replacement", "-n", namespace],
        capture_output=True,
        text=True,
    )
    assert as_kwok.returncode != 0
    assert "whose deletion has begun" in as_kwok.stderr, as_kwok.stderr
    assert "replacement" in cluster.names("pods", namespace)
    cluster.kubectl("delete", "pod", "replacement", "-n", namespace, "--wait=false")  # graceful: kwok finishes it
    eventually(lambda: "replacement" not in cluster.names("pods", namespace), what="kwok to finish the deletion")


def test_status_command_reports_every_component_healthy(cluster: Cluster) -> None:
    if not (cluster_tool.RUN_DIR / "pids").is_dir():
        pytest.skip("the session uses the cluster in $KUBECONFIG, not one testbed.cluster started")
    result = subprocess.run(
        [sys.executable, "-m", "testbed.cluster", "status"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        assert f"{component}" in result.stdout
    assert "UNHEALTHY" not in result.stdout


def test_another_clusters_teardown_leaves_the_s3_address_of_this_one(cluster: Cluster) -> None:
    """Clusters of one machine (each its TRAINER_OPERATOR_RUN_DIR) share SERVICES_ADDRESS: one
    going down must leave it on lo while this one's S3 server listens there."""
    if cluster_tool.services_address() != cluster_tool.SERVICES_ADDRESS:
        pytest.skip("SeaweedFS listens on 127.0.0.1: the cluster was started without root (CI runs as root)")
    cluster_tool.release_services_address()  # what another cluster's `down` does last
    assert cluster_tool.services_address() == cluster_tool.SERVICES_ADDRESS
    assert cluster_tool.s3_ready()
