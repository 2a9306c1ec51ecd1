"""v1alpha1 and v1 of the operator's API, on the real API server: both served, v1 stored, and an
object written in either reads the same, field for field, in the other (docs/api.md, Versions)."""

from typing import Any

import pytest

from tests.factories import trainer_manifest
from tests.harness import Cluster, KubectlError

GROUP = "trainer.operator.kubeflow.org"

# Every field of a Trainer's spec (a generic run may have every role).
EVERY_FIELD: dict[str, Any] = {
    "epochs": 3,
    "image": "busybox:1.36",
    "framework": "generic",
    "command": ["sh", "-c"],
    "args": ["sleep 1"],
    "port": 29400,
    "nprocPerNode": "2",
    "env": [
        {"name": "MODE", "value": "full"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ],
    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    "topology": {
        "workers": 2,
        "parameterServers": 1,
        "master": 0,
        "chief": 1,
        "evaluators": 1,
        "replicationFactor": 3,
        "elastic": {"minWorkers": 1, "maxWorkers": 4},
    },
    "checkpoint": {
        "bucket": "s3://runs/every-field",
        "credentialsSecret": "s3-credentials",
        "intervalMinutes": 5,
        "maxRetention": 2,
        "commitTimeoutSeconds": 120,
    },
    "profile": "every-field",
    "podTemplateOverrides": {
        role: {"metadata": {"labels": {"role": role}}, "spec": {"nodeSelector": {"pool": role}}}
        for role in ("master", "worker", "parameterServer", "chief", "evaluator")
    },
    "storage": {"size": "1Gi", "storageClassName": "local", "accessModes": ["ReadWriteOnce"], "mountPath": "/data"},
    "runPolicy": {
        "restartPolicy": "ExitCode",
        "restartPolicies": {"ps": "Never"},
        "successPolicy": "AllWorkers",
        "restartScope": "Gang",
        "backoffLimit": 2,
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 60,
        "cleanPodPolicy": "All",
        "suspend": True,
        "stallTimeoutSeconds": 300,
    },
    "scheduling": {"preference": "OnDemandFirst"},
}


def read(cluster: Cluster, version: str, name: str, namespace: str) -> dict[str, Any]:
    return cluster.get(f"trainers.{version}.{GROUP}", name, namespace)


def test_a_trainer_written_in_either_version_reads_the_same_in_the_other(cluster: Cluster, namespace: str) -> None:
    profile = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainingProfile", "metadata": {"name": "every-field"}}
    cluster.apply({**profile, "spec": {}}, namespace)
    alpha = trainer_manifest("written-in-alpha", **EVERY_FIELD)
    stable = {**trainer_manifest("written-in-v1", **EVERY_FIELD), "apiVersion": f"{GROUP}/v1"}
    for manifest in (alpha, stable):
        cluster.apply(manifest, namespace)
        name = manifest["metadata"]["name"]
        as_alpha, as_v1 = (read(cluster, v, name, namespace) for v in ("v1alpha1", "v1"))
        assert (as_alpha["apiVersion"], as_v1["apiVersion"]) == (f"{GROUP}/v1alpha1", f"{GROUP}/v1")
        assert as_alpha["spec"] == as_v1["spec"]
        assert {k: as_v1["spec"][k] for k in EVERY_FIELD} == EVERY_FIELD  # nothing lost on the way


def test_v1_is_what_the_api_server_stores(cluster: Cluster) -> None:
    crd = cluster.get("crd", f"trainers.{GROUP}")
    assert [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [
        ("v1alpha1", True, False),
        ("v1", True, True),
    ]
    assert "v1" in crd["status"]["storedVersions"]


def test_a_v1_request_is_reviewed_by_the_webhooks_as_a_v1alpha1_one(cluster: Cluster, namespace: str) -> None:
    """The webhooks are registered for v1alpha1 with matchPolicy Equivalent: the API server sends
    them a v1 request converted, so no version escapes them."""
    hostile = trainer_manifest("host-network", podTemplateOverrides={"worker": {"spec": {"hostNetwork": True}}})
    with pytest.raises(KubectlError) as refused:
        cluster.apply({**hostile, "apiVersion": f"{GROUP}/v1"}, namespace)
    assert "spec.podTemplateOverrides.worker.spec.hostNetwork" in refused.value.stderr
    assert "host-network" not in cluster.names("trainers", namespace)
