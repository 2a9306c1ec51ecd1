"""Claims backed by a directory on the real node (the local cluster has no provisioner)."""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed import cluster as cluster_tool
from tests.harness import Cluster


@contextmanager
def node_volume(cluster: Cluster, namespace: str, claim: str) -> Iterator[Path]:
    """The claim ``claim`` in ``namespace`` bound to a volume of a directory on the node; yields
    that directory, removed with the volume afterwards."""
    manifests, root = cluster_tool.node_volume(namespace, claim)
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": manifests})
    try:
        yield root
    finally:
        cluster.kubectl("delete", "persistentvolume", manifests[0]["metadata"]["name"], "--wait=false")
        shutil.rmtree(root, ignore_errors=True)
