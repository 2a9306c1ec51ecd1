"""The README's quickstart, the release's Helm chart and the main job on a cluster of one's own
(marker: quickstart): the bare cluster — the local cluster with no fake nodes and the real node
untainted (`testbed.node up --untainted`), nothing of the test bed in it: no prepared namespace,
no toleration, no S3 credentials, no operator — and a kind cluster (test_kind.py), whose node
pulls through the bare cluster's registry. A pytest session of its own, after the e2e tier's
(whose cluster and node are down by then). The operator's image is on the node as the release
names it, docker.io/library/trainer-operator:<version>: the node pulls docker.io through the local
registry, as a cluster with internet access pulls from Docker Hub."""

import os
import subprocess
from collections.abc import Iterator

import pytest

from hack import release
from testbed import cluster as cluster_tool
from testbed import containerd, images, node

IMAGE = "docker.io/library/trainer-operator"
CLUSTER_WIDE = (
    "customresourcedefinitions,clusterroles,clusterrolebindings,validatingwebhookconfigurations,"
    "mutatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings,namespaces"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/quickstart/" in str(item.path):
            item.add_marker(pytest.mark.quickstart)


@pytest.fixture(scope="session")
def bare_cluster() -> Iterator[dict[str, str]]:
    """The bare cluster; the environment a user's shell has (KUBECONFIG, kubectl on PATH)."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("the real node runs a kubelet and containerd: run the quickstart tests as root (CI does)")
    cluster_tool.FAKE_NODES = 0
    if cluster_tool.main(["up"]) != 0 or node.main(["up", "--untainted"]) != 0:
        pytest.fail("the bare cluster did not come up; see the messages above")
    yield {
        **os.environ,
        "KUBECONFIG": str(cluster_tool.RUN_DIR / "admin.kubeconfig"),
        "PATH": f"{cluster_tool.bin_dir()}:{os.environ['PATH']}",
    }
    node.main(["down"])
    cluster_tool.main(["down"])


@pytest.fixture(scope="session")
def version() -> str:
    return release.versions()["trainerop-trainer"]


def on_the_node(tag: str) -> str:
    """The operator's image, built from this checkout, as IMAGE:``tag`` in the registry and on the
    node (its containerd keeps images across clusters: an earlier build under the same name would
    otherwise be what the pods run)."""
    built = images.build("controllers")
    images.buildah("tag", built, f"{IMAGE}:{tag}")
    images.publish(containerd.node_dir(), f"{IMAGE}:{tag}", built)
    return f"{IMAGE}:{tag}"


@pytest.fixture(scope="session")
def release_image(bare_cluster: dict[str, str], version: str) -> str:
    """The operator's image as the release names it, where the node pulls it."""
    return on_the_node(version)


def cluster_wide(env: dict[str, str]) -> set[str]:
    """Every cluster-wide object and namespace there is, by kind and name."""
    listed = subprocess.run(["kubectl", "get", CLUSTER_WIDE, "-o", "name"], env=env, capture_output=True, text=True)
    return set(listed.stdout.split())
