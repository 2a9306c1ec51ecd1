"""Every test here runs real containers on the real node (marker: e2e): the local cluster with
hack/node.py's node (containerd, runc, the kubelet). Needs root and the Debian packages
hack/node.py names; the fixture fails saying what is missing."""

from collections.abc import Iterator

import pytest
from hack import node

from tests.harness import Cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> Iterator[str]:
    if node.main(["up"]) != 0:
        pytest.fail("the real node did not come up; see the message above")
    yield node.NODE
    node.main(["down"])
