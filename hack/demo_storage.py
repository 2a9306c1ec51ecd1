"""Where the demo's Trainer checkpoints on a cluster of your own (hack/cluster_demo.py): a
ReadWriteMany claim in the StorageClass you name, or else an S3 server of the demo's own in its
namespace — SeaweedFS (`weed mini`: one pod, its data in an emptyDir, so for the demo only) behind
a Service on SeaweedFS's S3 port, which the operator's egress policy lets the checkpoint controller
reach. Its key is made on the demo's first run (later runs keep it) and may read, write and list,
not make buckets: SeaweedFS makes the one bucket at start. Only the S3 port asks for a key;
SeaweedFS's other ports (master, volume, filer) take none, and a NetworkPolicy closes them where
the cluster enforces NetworkPolicies — elsewhere anyone in the cluster reaches them.

The objects are plain data; hack/cluster_demo.py applies them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from testbed import cluster, images

SEAWEEDFS_VERSION = "4.53"  # what the test bed's weed says it is (tests/quickstart/test_demo.py checks)
S3_IMAGE = f"{images.SEAWEEDFS_REPOSITORY.removeprefix('docker.io/')}:{SEAWEEDFS_VERSION}"  # SeaweedFS's own image
S3_NAME = "demo-s3"
S3_PORT = 8333  # SeaweedFS's S3 port (deploy/components/network-policies allows the checkpoint controller it)
MASTER = "127.0.0.1:9333"  # weed mini's master, inside the pod (weed shell lists the buckets there)
BUCKET = "checkpoints"
CREDENTIALS = "checkpoint-credentials"  # the Trainer's spec.checkpoint.credentialsSecret
ACCESS_KEY = "trainer-demo"
CLAIM = "demo-checkpoints"
LABELS = {"app.kubernetes.io/name": S3_NAME, "app.kubernetes.io/part-of": "trainer-demo"}


@dataclass(frozen=True)
class Storage:
    objects: list[dict[str, Any]]  # to apply before the Trainer
    checkpoint: dict[str, str]  # spec.checkpoint's bucket (and credentialsSecret)
    s3_image: str | None  # an S3 server of the demo's own (its bucket made once it is ready), else None


def claim_storage(namespace: str, storage_class: str) -> Storage:
    """The Trainer's checkpoint claim in ``storage_class`` (ReadWriteMany: every replica mounts it)."""
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return Storage([claim], {"bucket": CLAIM}, s3_image=None)


def s3_storage(namespace: str, image: str, secret_key: str) -> Storage:
    """SeaweedFS in ``namespace`` and the Trainer's credentials Secret for it."""
    credentials = cluster.s3_variables(ACCESS_KEY, secret_key, f"http://{S3_NAME}.{namespace}.svc:{S3_PORT}")
    identities = cluster.s3_identities(ACCESS_KEY, secret_key, ["Read", "Write", "List", "Tagging"])
    objects = [
        secret(namespace, CREDENTIALS, credentials),
        secret(namespace, f"{S3_NAME}-identities", {"s3.json": json.dumps(identities)}),
        s3_deployment(namespace, image),
        s3_service(namespace),
        s3_ingress(namespace),
    ]
    return Storage(objects, {"bucket": f"s3://{BUCKET}/seed", "credentialsSecret": CREDENTIALS}, s3_image=image)


def secret(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }


def s3_container(image: str) -> dict[str, Any]:
    """weed mini with its S3 key file; every port bound, the volume server at the pod's loopback."""
    command = [
        "/usr/bin/weed",
        "mini",
        "-dir=/data",
        "-ip=127.0.0.1",
        "-ip.bind=0.0.0.0",
        f"-s3.port={S3_PORT}",
        "-s3.config=/etc/seaweedfs/s3.json",
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-bucket={BUCKET}",  # made at start unless it is there
    ]
    mounts = [("data", "/data"), ("tmp", "/tmp"), ("identities", "/etc/seaweedfs")]
    return {
        "name": "seaweedfs",
        "image": image,
        "command": command,
        "ports": [{"name": "s3", "containerPort": S3_PORT}],
        "readinessProbe": {"tcpSocket": {"port": S3_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "50m", "memory": "192Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": name, "mountPath": path} for name, path in mounts],
    }


def s3_deployment(namespace: str, image: str) -> dict[str, Any]:
    volumes = [
        {"name": "data", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "identities", "secret": {"secretName": f"{S3_NAME}-identities"}},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": S3_NAME, "namespace": namespace, "labels": LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [s3_container(image)],
                    "volumes": volumes,
                },
            },
        },
    }


def s3_service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": S3_NAME, "namespace": namespace, "labels": LABELS},
        "spec": {"selector": LABELS, "ports": [{"name": "s3", "port": S3_PORT, "targetPort": "s3"}]},
    }


def s3_ingress(namespace: str) -> dict[str, Any]:
    """Only the S3 port, from anywhere (the checkpoint controller's namespace and the Trainer's pods)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": S3_NAME, "namespace": namespace, "labels": LABELS},
        "spec": {
            "podSelector": {"matchLabels": LABELS},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": S3_PORT, "protocol": "TCP"}]}],
        },
    }


def list_buckets_command() -> tuple[list[str], str]:
    """What `kubectl exec -i` runs in the S3 pod to list its buckets, and its stdin."""
    return ["/usr/bin/weed", "shell", f"-master={MASTER}"], "s3.bucket.list\n"


def has_bucket(listed: str) -> bool:
    """Whether `weed shell`'s s3.bucket.list output names the demo's bucket."""
    return any(line.split()[:1] == [BUCKET] for line in listed.splitlines())
