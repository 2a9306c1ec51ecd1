"""A tenant with ``edit`` in their namespace, against the deployed operator: what they write is
held to their QuotaPolicy and leaves the audit trail as it is."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.factories import quota_policy, trainer_manifest
from tests.harness import Cluster, condition, eventually

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
    cluster: Cluster, namespace: str, tenant: str, two_gpus: str
) -> None:
    """2 workers of 1 GPU fit a budget of 2; a sidecar asking 7 GPUs more in each would hold 16."""
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
