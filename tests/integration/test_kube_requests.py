"""The controllers' requests against the real API server where the server's own rules matter: a
delete by UID (the precondition the kubelet sends) leaves an object made since under the same name,
through the aiohttp path and through lightkube's (exec or basic auth); a delete's answer says
whether the object is gone already; a list comes in pages, the same through both paths, and a list
for keys asks the server for metadata alone."""

import json

import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from tests.harness import Cluster
from trainerop_common import kube as kube_module
from trainerop_common.kube import Kube
from trainerop_common.objects import metadata_only, slim
from trainerop_common.ratelimit import TokenBucket

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "rank-names"},
    "spec": {"clusterIP": "None", "selector": {"app": "none"}},
}


def kube(cluster: Cluster, path: str) -> Kube:
    if path == "aiohttp":
        return Kube.from_environment("trainer", qps=50, burst=50)
    return Kube(AsyncClient(KubeConfig.from_file(cluster.kubeconfig)), TokenBucket(50, 50), "trainer")


@pytest.mark.parametrize("path", ["aiohttp", "lightkube"])
async def test_a_delete_by_uid_leaves_the_object_made_since_under_that_name(
    cluster: Cluster, namespace: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    client = kube(cluster, path)
    cluster.apply(SERVICE, namespace)
    first = cluster.get("service", "rank-names", namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "service", "rank-names", "-n", namespace)
    cluster.apply(SERVICE, namespace)
    second = cluster.get("service", "rank-names", namespace)["metadata"]["uid"]

    assert await client.delete_core("Service", namespace, "rank-names", uid=first) == "gone"  # that one is
    assert cluster.get("service", "rank-names", namespace)["metadata"]["uid"] == second
    # lightkube's path reads no answer: it cannot tell that the Service went at once
    removed = "removed" if path == "aiohttp" else "deleting"
    assert await client.delete_core("Service", namespace, "rank-names", uid=second) == removed
    assert "rank-names" not in cluster.names("services", namespace)
    assert await client.delete_core("Service", namespace, "rank-names", uid=second) == "gone"  # 404


@pytest.mark.parametrize("path", ["aiohttp", "lightkube"])
async def test_a_forced_delete_by_uid_removes_the_pod_at_once(
    cluster: Cluster, namespace: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod on a node that will never confirm (deleted, partitioned) is deleted with no grace
    period; with the UID in the request's body too (the API server then reads no option from the
    query: the grace period sent there was dropped and the pod waited for a kubelet)."""
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    client = kube(cluster, path)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stranded"},
        "spec": {"nodeName": "a-node-that-is-gone", "containers": [{"name": "c", "image": "none"}]},
    }
    cluster.apply(pod, namespace)
    uid = cluster.get("pod", "stranded", namespace)["metadata"]["uid"]
    assert await client.delete_core("Pod", namespace, "stranded", force=True, uid=uid) != "gone"
    assert "stranded" not in cluster.names("pods", namespace)  # gone, not waiting with a deletionTimestamp


async def test_a_failed_pod_is_removed_by_its_delete_and_a_running_one_is_not(
    cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server gives a Failed pod no grace period: its delete's answer says it is gone, so
    the trainer replaces it without waiting for the watch (Actions.removed). A running pod's
    deletion waits for its kubelet."""
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    client = kube(cluster, "aiohttp")
    for name, phase in (("failed", "Failed"), ("running", "Running")):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"nodeName": "a-node-of-nobody", "containers": [{"name": "c", "image": "none"}]},
        }
        cluster.apply(pod, namespace)
        status = json.dumps({"status": {"phase": phase}})
        cluster.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", status)
    uids = {n: cluster.get("pod", n, namespace)["metadata"]["uid"] for n in ("failed", "running")}
    assert await client.delete_core("Pod", namespace, "failed", uid=uids["failed"]) == "removed"
    assert "failed" not in cluster.names("pods", namespace)
    assert await client.delete_core("Pod", namespace, "running", uid=uids["running"]) == "deleting"
    assert cluster.get("pod", "running", namespace)["metadata"]["deletionTimestamp"]
    await client.delete_core("Pod", namespace, "running", force=True)


@pytest.mark.parametrize("path", ["aiohttp", "lightkube"])
async def test_a_list_reads_every_page_and_a_list_for_keys_reads_only_metadata(
    cluster: Cluster, namespace: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setattr(kube_module, "LIST_PAGE", 2)  # 5 objects: three pages
    client = kube(cluster, path)
    names = [f"listed-{i}" for i in range(5)]
    for name in names:
        labelled = {**SERVICE, "metadata": {"name": name, "labels": {"listing": namespace}}}
        cluster.apply(labelled, namespace)
    cluster.apply({**SERVICE, "metadata": {"name": "unlabelled"}}, namespace)

    listed = await client.list_core("Service", f"listing={namespace}")
    assert sorted(o["metadata"]["name"] for o in listed) == names
    assert {(o["kind"], o["apiVersion"]) for o in listed} == {("Service", "v1")}
    assert all(o["spec"]["clusterIP"] == "None" and "managedFields" not in o["metadata"] for o in listed)
    as_kubectl = json.loads(
        cluster.kubectl("get", "services", "-n", namespace, "-l", f"listing={namespace}", "-o", "json")
    )
    assert sorted(listed, key=lambda o: o["metadata"]["name"]) == [
        slim({"apiVersion": "v1", "kind": "Service", **o}) for o in as_kubectl["items"]
    ]

    keys = await client.list_core("Service", f"listing={namespace}", metadata_only)
    assert sorted(o["metadata"]["name"] for o in keys) == names
    assert all(set(o) == {"metadata"} and o["metadata"]["namespace"] == namespace for o in keys)
