"""Every test here runs against the real local cluster (marker: integration)."""

from collections.abc import Iterator
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import registry
from tests.harness import Cluster
from tests.integration.buckets import new_bucket


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def policy(cluster: Cluster, namespace: str) -> Iterator[Any]:
    """Apply a QuotaPolicy that covers only this test's namespace; removed afterwards."""
    name = f"quota-{namespace}"

    def apply(**spec: Any) -> str:
        cluster.apply(
            {
                "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
                "kind": "QuotaPolicy",
                "metadata": {"name": name},
                "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}, **spec},
            }
        )
        return name

    yield apply
    cluster.kubectl("delete", "quotapolicy", name, "--ignore-not-found")


@pytest.fixture(scope="session")
def local_registry(cluster: Cluster) -> Iterator[str]:
    """The local cluster's registry (testbed/registry.py), running for the tests that read it; its address."""
    registry.start(cluster_tool.RUN_DIR)
    yield registry.address()
    cluster_tool.stop_processes(cluster_tool.RUN_DIR, ["registry"])


@pytest.fixture
def bucket(cluster: Cluster, namespace: str) -> str:
    """A bucket of its own for the test on the local S3 server, and the namespace's credentials
    Secret ckpt-creds for it; its URI."""
    return new_bucket(cluster, namespace)
