"""A tenant with ``edit`` in their namespace, against the deployed operator: what they write is
held to their QuotaPolicy and leaves the audit trail as it is."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.attack.conftest import needs
from tests.factories import quota_policy, trainer_manifest
from tests.harness import Cluster, condition, eventually
from tests.integration.test_kubeflow import job, replica

GPU = "nvidia.com/gpu"
TENANT = "mallory@example.com"


@pytest.fixture
def tenant(cluster: Cluster, namespace: str) -> str:
    """A user with the cluster's ``edit`` and the operator's ``trainer-operator-edit`` in ``namespace``."""
    for role in ("edit", "trainer-operator-edit"):
        cluster.kubectl(
            "create", "rolebinding", f"tenant-{role}", f"--clusterrole={role}", f"--user={TENANT}", "-n", namespace
        )
    return TENANT


@pytest.fixture
def two_gpus(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A QuotaPolicy of 2 GPUs over ``namespace``."""
    name = f"quota-{namespace}"
    cluster.apply(quota_policy(name, namespace, budgets={"spot": {GPU: 2}, "onDemand": {GPU: 2}}))
    yield name
    cluster.kubectl("delete", "quotapolicy", name, "--ignore-not-found")


def test_a_gpu_sidecar_in_an_override_does_not_slip_past_the_quota(
    cluster: Cluster, overlay: str, namespace: str, tenant: str, two_gpus: str
) -> None:
    """2 workers of 1 GPU fit a budget of 2; a sidecar asking 7 GPUs more in each would hold 16."""
    needs(overlay, "quota")
    hog = {"name": "hog", "image": "busybox:1.36", "restartPolicy": "Always", "resources": {"limits": {GPU: 7}}}
    body: dict[str, Any] = trainer_manifest("sidecar", resources={"limits": {GPU: 1}}, topology={"workers": 2})
    body["spec"]["podTemplateOverrides"] = {"worker": {"spec": {"initContainers": [hog]}}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", f"--as={tenant}", stdin=json.dumps(body))

    def refused() -> dict[str, Any] | None:
        found = condition(cluster.get("trainer", "sidecar", namespace), "QuotaAdmitted")
        return found if found.get("reason") == "ExceedsQuota" else None

    said = eventually(refused, what="the quota to refuse the run as more than its budget")
    assert said["status"] == "False"
    assert f"the run needs 2 pods (16 {GPU})" in said["message"]
    assert cluster.names("pods", namespace) == set()


def test_a_kubeflow_jobs_trainer_is_recorded_as_made_for_the_tenant_not_an_unknown_user(
    cluster: Cluster, overlay: str, namespace: str, tenant: str
) -> None:
    """The kubeflow controller makes the job's Trainer; its creation record names who made the job."""
    needs(overlay, "kubeflow", "audit")
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch")}
    body = json.dumps(job("PyTorchJob", "mnist", specs))
    eventually(
        lambda: (
            cluster.kubectl(
                "auth", "can-i", "create", "pytorchjobs.kubeflow.org", "-n", namespace, f"--as={tenant}"
            ).strip()
            == "yes"
        ),
        what="the edit role to aggregate the Kubeflow jobs' rules",
    )
    cluster.kubectl("create", "-n", namespace, "-f", "-", f"--as={tenant}", stdin=body)
    uid = eventually(lambda: cluster.get("trainer", "mnist", namespace), what="the job's Trainer")["metadata"]["uid"]

    def creation() -> dict[str, Any] | None:
        items = json.loads(cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"))["items"]
        found = [
            r["spec"] for r in items if r["spec"]["objectRef"].get("uid") == uid and r["spec"]["action"] == "Created"
        ]
        return found[0] if found else None

    created = eventually(creation, what="the Trainer's creation record")
    assert (created["user"]["username"], created["reason"]) == (tenant, "CreatedOnBehalf"), created["message"]
