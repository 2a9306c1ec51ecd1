"""The real node runs real containers: a pod's process runs in runc under the kubelet, its output
reaches `kubectl logs` in the kubelet's log format, and its exit code reaches the pod's status
(which the trainer controller's restart rules read)."""

import json
from typing import Any

from testbed import node
from tests.harness import Cluster, eventually


def pod(name: str, script: str) -> dict[str, Any]:
    return node.pod_on_the_node(name, {"name": "main", "image": node.BUSYBOX_IMAGE, "command": ["sh", "-c", script]})


def finished(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj = json.loads(cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json"))
    return obj if obj["status"].get("phase") in ("Succeeded", "Failed") else None


def test_a_pod_runs_a_real_container_and_its_output_reaches_kubectl_logs(
    cluster: Cluster, namespace: str, real_node: str
) -> None:
    cluster.apply(pod("hello", "echo hello from $(hostname); cat /etc/resolv.conf"), namespace)
    done = eventually(lambda: finished(cluster, namespace, "hello"), timeout=120, what="the pod to finish")
    assert done["status"]["phase"] == "Succeeded"
    assert done["spec"]["nodeName"] == real_node
    assert done["status"]["podIP"].startswith("10.88.")  # the CNI bridge's subnet
    logs = cluster.kubectl("logs", "hello", "-n", namespace)
    assert "hello from hello" in logs
    assert "nameserver 10.0.0.10" in logs  # the kubelet's clusterDNS


def test_a_containers_exit_code_reaches_the_pod_status(cluster: Cluster, namespace: str, real_node: str) -> None:
    cluster.apply(pod("fails", "echo about to fail; exit 3"), namespace)
    done = eventually(lambda: finished(cluster, namespace, "fails"), timeout=120, what="the pod to finish")
    assert done["status"]["phase"] == "Failed"
    (state,) = done["status"]["containerStatuses"]
    assert state["state"]["terminated"]["exitCode"] == 3


def test_a_headless_service_name_resolves_in_a_pod(cluster: Cluster, namespace: str, real_node: str) -> None:
    """The rendezvous contract: a replica's headless Service name resolves to its pod (CoreDNS)."""
    name = f"dns-check.{namespace}.svc.cluster.local"
    script = f"for i in $(seq 60); do nslookup {name} && exit 0; sleep 1; done; exit 1"
    manifest = pod("dns", script)
    manifest["metadata"]["labels"] = {"app": "dns-check"}
    cluster.apply(manifest, namespace)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "dns-check"},
            "spec": {"clusterIP": "None", "selector": {"app": "dns-check"}, "publishNotReadyAddresses": True},
        },
        namespace,
    )
    done = eventually(lambda: finished(cluster, namespace, "dns"), timeout=120, what="the pod to finish")
    logs = cluster.kubectl("logs", "dns", "-n", namespace)
    assert done["status"]["phase"] == "Succeeded", logs
    assert done["status"]["podIP"] in logs  # the name resolved to the pod's own address
