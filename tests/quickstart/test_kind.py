"""The README's quickstart and the main job (hack/demo.sh with $KUBECONFIG) on kind, the local
cluster the product's design names: a one-node kind cluster whose node podman runs, made by kind
itself from a node image built here (testbed/kind.py). Its node pulls through the local registry,
so the operator's image is the release's, as on the bare cluster."""

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import kind
from tests.quickstart.test_demo import run_the_demo
from tests.quickstart.test_quickstart import follow_the_quickstart


@pytest.fixture(scope="module")
def kind_cluster(bare_cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    """The environment of a shell whose KUBECONFIG is kind's (kubectl from the test bed, the same version)."""
    kubeconfig = kind.up()
    yield {**bare_cluster, "KUBECONFIG": str(kubeconfig)}
    kind.down()


def test_the_cluster_is_kinds(kind_cluster: dict[str, str]) -> None:
    listed = subprocess.run(["kubectl", "get", "nodes", "-o", "json"], env=kind_cluster, capture_output=True, text=True)
    [only] = json.loads(listed.stdout)["items"]
    assert only["metadata"]["name"] == f"{kind.NAME}-control-plane"  # kind's name for the node
    assert only["spec"]["providerID"].startswith("kind://podman/")


def test_the_readme_quickstart_on_kind(
    kind_cluster: dict[str, str], release_image: str, version: str, tmp_path: Path
) -> None:
    follow_the_quickstart(kind_cluster, release_image, version, tmp_path)


def test_the_demo_on_kind(kind_cluster: dict[str, str], release_image: str) -> None:
    run_the_demo(kind_cluster, release_image)
