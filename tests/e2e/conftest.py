"""Every test here runs real containers on the real node (marker: e2e): the local cluster with
testbed/node.py's node (containerd, runc, the kubelet, kube-proxy, CoreDNS). Needs root and the
Debian packages testbed/packages.py names; the fixture fails saying what is missing. Tests that train
use the operator as users deploy it: the controllers as pods from their image
(testbed/deploy.py, deploy/overlays/dev), not the local processes of the integration tests. The
fixtures real_node and operator_in_cluster are tests/conftest.py's: tests/attack shares them."""

import uuid
from collections.abc import Iterator

import pytest

from testbed import containerd, images, node
from tests.harness import Cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def jax_image(real_node: str, operator_in_cluster: None) -> str:
    """examples/jax's image on the node (with the operator in the cluster to run it)."""
    images.load("jax-example", containerd.node_dir())
    return images.IMAGES["jax-example"].ref


@pytest.fixture
def real_namespace(cluster: Cluster, real_node: str) -> Iterator[str]:
    """A namespace whose pods run on the real node, with the S3 checkpoint credentials Secret."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": [node.team_namespace(name)]})
    cluster.apply(node.checkpoint_secret(name), name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
