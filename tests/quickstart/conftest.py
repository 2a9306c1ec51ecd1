"""The README's quickstart on a bare cluster (marker: quickstart): a pytest session of its own,
after the e2e tier's (its cluster and node are down by then), since it makes the cluster bare."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/quickstart/" in str(item.path):
            item.add_marker(pytest.mark.quickstart)
