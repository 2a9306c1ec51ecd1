"""Shared fixtures.

The integration session fixture brings the local cluster up with testbed/cluster.py (real
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok), or uses the cluster in
$KUBECONFIG when the user set one, installs deploy/overlays/local (CRDs, namespace,
ServiceAccounts, RBAC) and runs the controllers as separate processes, each
authenticated as its own ServiceAccount so RBAC is exercised for real.

TRAINEROP_KEEP_CLUSTER=1 leaves a cluster the session started running for the next session.

Under pytest-xdist (``-n 2``, as tox runs the integration tests) each worker brings up a local
cluster of its own (testbed/cluster.py WORKER: its own ports and run directory), so the tests run
concurrently and each still has a whole cluster: its capacity, its controllers to restart, its
metrics. Against $KUBECONFIG the tests run in one process (``-n 0``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from testbed import cluster as cluster_tool
from testbed import deploy, localdev, node
from tests.harness import Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    user_kubeconfig = os.environ.get("KUBECONFIG")
    if user_kubeconfig and not os.path.isfile(user_kubeconfig):
        pytest.fail(f"KUBECONFIG={user_kubeconfig} does not exist; unset it to test against the local cluster")
    if user_kubeconfig and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("against $KUBECONFIG run the tests in one process (-n 0): each worker would start the controllers")
    started = False
    if not user_kubeconfig:
        if cluster_tool.main(["up"]) != 0:
            pytest.fail("the local cluster did not come up; see the messages above")
        started = True
        os.environ["KUBECONFIG"] = str(cluster_tool.RUN_DIR / "admin.kubeconfig")
    # The audit controller's status.audit may lag its records by --summary-delay-seconds (30 by
    # default: a few seconds of actions cost one status write); tests that wait for the count would
    # wait that long each. Every controller the tests start (and restart) inherits this.
    os.environ.setdefault("TRAINEROP_SUMMARY_DELAY_SECONDS", "2")
    try:
        localdev.install()
        ports = localdev.start()
    except cluster_tool.ClusterError as err:
        pytest.fail(str(err))
    state = localdev.state_dir()
    yield Cluster(
        kubeconfig=localdev.admin_kubeconfig(),
        kubectl_bin=cluster_tool.bin_dir() / "kubectl",
        metrics_ports=ports,
        sa_kubeconfigs={c: state / f"{c}.kubeconfig" for c in localdev.CONTROLLERS},
    )
    localdev.stop()
    if started and os.environ.get("TRAINEROP_KEEP_CLUSTER") != "1":
        cluster_tool.main(["down"])
        os.environ.pop("KUBECONFIG", None)


def _scratch_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "trainer-operator-test=true")
    tolerations = [f"{k}={v}" for k, v in cluster_tool.DEFAULT_TOLERATIONS.items()]
    cluster.kubectl("annotate", "namespace", name, *tolerations)
    # The seed Trainer checkpoints to the PVC pvc-backups: every test namespace has one.
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": cluster_tool.checkpoint_volume(name)})
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
    cluster.kubectl("delete", "persistentvolume", f"{name}-pvc-backups", "--wait=false")


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace for one test (a team's namespace)."""
    yield from _scratch_namespace(cluster)


@pytest.fixture
def other_namespace(cluster: Cluster) -> Iterator[str]:
    """A second fresh namespace (another team's), for isolation tests."""
    yield from _scratch_namespace(cluster)


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> Iterator[str]:
    """The real node (testbed/node.py): real containers, for tests/e2e and tests/attack."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("the real node runs a kubelet and containerd: run the e2e tests as root (CI does)")
    if node.main(["up"]) != 0:
        pytest.fail("the real node did not come up; see the message above")
    yield node.NODE
    node.main(["down"])


@pytest.fixture(scope="session")
def operator_in_cluster(cluster: Cluster, real_node: str) -> Iterator[None]:
    """deploy/overlays/dev with the controllers' image; the local controllers stop meanwhile."""
    localdev.stop()
    if deploy.main(["up"]) != 0:
        pytest.fail("the operator did not come up in the cluster; see the message above")
    yield
    deploy.main(["down"])
