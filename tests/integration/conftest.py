"""Every test here runs against the real local cluster (marker: integration)."""

from collections.abc import Iterator
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import registry
from tests.factories import quota_policy
from tests.harness import Cluster
from tests.integration.buckets import new_bucket

# Files whose fixtures build a program the first time (cert-manager, the registry, cosign, Kueue,
# Prometheus: minutes each on a cold cache). They run last, so that CI's background builds
# (testbed/prepare.py, in that order) are done by then and no test worker sits waiting for one.
BUILD_ON_FIRST_USE = (
    "test_cert_manager.py",
    "test_image_verification.py",
    "test_signing.py",
    "test_kueue.py",
    "test_proactive.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: "tests/integration/" in str(item.path) and item.path.name in BUILD_ON_FIRST_USE)


@pytest.fixture
def policy(cluster: Cluster, namespace: str) -> Iterator[Any]:
    """Apply a QuotaPolicy that covers only this test's namespace; removed afterwards."""
    name = f"quota-{namespace}"

    def apply(**spec: Any) -> str:
        cluster.apply(quota_policy(name, namespace, **spec))
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
