"""A pod calling the operator's ports directly, where NetworkPolicies are enforced: kube-router's
network policy controller on the real node (testbed/netpol.py) enforces the overlay's policies
(deploy/components/network-policies) while these tests run.

As shipped, the webhook port is open to any source (the API server's address differs per cluster;
a forged review is not believed: test_audit_forgery.py). docs/deploy.md tells a platform team to
name its control plane's addresses; with that patch a pod cannot connect to the port, while the
API server still calls every webhook (a Trainer is admitted and its pods are created)."""

import json
import uuid
from collections.abc import Iterator

import pytest

from testbed import cluster as cluster_tool
from testbed import deploy, localdev, netpol
from tests.attack.conftest import from_a_pod, pod_of
from tests.factories import trainer_manifest
from tests.harness import Cluster, eventually

WEBHOOK_PORT = 9443  # deploy/controllers/*/deployment.yaml
METRICS_PORT = 8080
# What a pod runs: a TCP connection to sys.argv[1]:sys.argv[2], and how it ended.
CONNECT = """
import json, socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print(json.dumps("connected"))
except OSError as err:
    print(json.dumps(type(err).__name__))
"""


@pytest.fixture(scope="module")
def enforced(cluster: Cluster, overlay: str) -> Iterator[str]:
    """NetworkPolicies enforced on the node, with the test bed's own allowances (netpol.py)."""
    if not any(o["kind"] == "NetworkPolicy" for o in deploy.rendered(overlay)):
        pytest.skip(f"deploy/overlays/{overlay} ships no NetworkPolicies (components/network-policies)")
    if netpol.up() != 0:
        pytest.fail("NetworkPolicies are not enforced on the node; see the message above")
    yield overlay
    shipped = next(o for o in deploy.rendered(overlay) if o["metadata"]["name"] == "trainer-operator-webhooks")
    cluster.kubectl("replace", "-f", "-", stdin=json.dumps(shipped))
    netpol.down()


def reach(cluster: Cluster, namespace: str, ip: str, port: int) -> str:
    """How a TCP connection from a pod of ``namespace`` to ``ip``:``port`` ended."""
    return str(from_a_pod(cluster, namespace, f"probe-{uuid.uuid4().hex[:6]}", CONNECT, ip, str(port)))


def only_from_the_control_plane(cluster: Cluster, cidrs: list[str]) -> None:
    """docs/deploy.md's patch: the webhook port only from the control plane's addresses."""
    ops = [{"op": "add", "path": "/spec/ingress/0/from", "value": [{"ipBlock": {"cidr": c}} for c in cidrs]}]
    cluster.kubectl(
        "patch", "networkpolicy", "trainer-operator-webhooks", "-n", localdev.NAMESPACE, "--type=json",
        "-p", json.dumps(ops),
    )  # fmt: skip


def test_a_pod_cannot_reach_a_webhook_port_once_the_control_plane_is_named(
    cluster: Cluster, enforced: str, namespace: str, pods_namespace: str
) -> None:
    ip = pod_of(cluster, "trainer")["status"]["podIP"]
    assert reach(cluster, pods_namespace, ip, METRICS_PORT) != "connected"  # not a scrapers' namespace
    assert reach(cluster, pods_namespace, ip, WEBHOOK_PORT) == "connected"  # as shipped: from anywhere
    control_plane = cluster_tool.host_ip()
    assert control_plane, "the API server's address on this machine"
    only_from_the_control_plane(cluster, [f"{control_plane}/32"])
    eventually(
        lambda: reach(cluster, pods_namespace, ip, WEBHOOK_PORT) != "connected" or None,
        timeout=90,
        what="a pod refused at the webhook port",
    )
    # The API server still calls the webhooks: the Trainer is admitted, its pods are created.
    cluster.apply(trainer_manifest("through-the-api", topology={"workers": 1}), namespace)
    eventually(
        lambda: pods_of(cluster, namespace, "through-the-api") or None,
        what="the Trainer's pod, created through the trainer's own webhook",
    )


def pods_of(cluster: Cluster, namespace: str, trainer: str) -> list[dict[str, object]]:
    listed = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"trainer-name={trainer}", "-o", "json")
    return list(json.loads(listed)["items"])
