"""Checkpoint storage for tests: buckets on the local cluster's S3 server (SeaweedFS) and the
credentials Secret a Trainer names."""

import uuid

from testbed import cluster as cluster_tool
from tests.harness import Cluster
from trainerop_sdk.layout import parse_s3_uri
from trainerop_sdk.s3 import Credentials, S3Client


def s3(bucket: str) -> S3Client:
    return S3Client(Credentials.from_env(cluster_tool.s3_credentials()), parse_s3_uri(bucket).bucket)


def create_credentials(cluster: Cluster, namespace: str, name: str = "ckpt-creds") -> None:
    literals = [f"--from-literal={k}={v}" for k, v in cluster_tool.s3_credentials().items()]
    cluster.kubectl("create", "secret", "generic", name, "-n", namespace, *literals)


def new_bucket(cluster: Cluster, namespace: str) -> str:
    """A bucket of its own, and the namespace's credentials Secret for it; its URI."""
    name = f"ckpt-{uuid.uuid4().hex[:10]}"
    S3Client(Credentials.from_env(cluster_tool.s3_credentials()), name).create_bucket()
    create_credentials(cluster, namespace)
    return f"s3://{name}/runs"
