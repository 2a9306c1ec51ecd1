"""A canary secret value never leaves the places a user put it (docs/architecture.md): it is in a Trainer's
env, in the Secret a profile mounts and in the checkpoint credentials the checkpoint controller
reads, and it must not appear in any controller's log, any Event, any status or any AuditLog."""

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.factories import quota_policy, trainer_manifest
from tests.harness import Cluster, condition, eventually

GATES = ("ProfileResolved", "QuotaAdmitted", "CheckpointReady")


@pytest.fixture
def debug_logs(cluster: Cluster) -> Iterator[None]:
    """The five controllers restarted at DEBUG for the test (kopf then logs far more of what it
    handles), and at the default level again afterwards."""
    localdev.stop()
    localdev.start(extra_env={"TRAINEROP_LOG_LEVEL": "DEBUG"})
    yield
    localdev.stop()
    localdev.start()


def test_a_canary_secret_reaches_no_log_event_status_or_audit_record(
    cluster: Cluster, namespace: str, debug_logs: None
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    cluster.kubectl("create", "secret", "generic", "canary-vault", "-n", namespace, f"--from-literal=api-key={canary}")
    creds = {**cluster_tool.s3_credentials(), "AWS_SECRET_ACCESS_KEY": canary}
    cluster.kubectl(
        "create",
        "secret",
        "generic",
        "canary-s3",
        "-n",
        namespace,
        *[f"--from-literal={k}={v}" for k, v in creds.items()],
    )
    cluster.apply(
        {
            "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
            "kind": "TrainingProfile",
            "metadata": {"name": "canary-profile"},
            "spec": {"runtimeConfig": {"secret": "canary-vault", "mountPath": "/etc/canary"}},
        },
        namespace,
    )
    policy = f"canary-{namespace}"
    cluster.apply(
        quota_policy(policy, namespace, budgets={"spot": {"nvidia.com/gpu": 64}, "onDemand": {"nvidia.com/gpu": 64}})
    )
    try:
        cluster.apply(
            trainer_manifest(
                "canary",
                profile="canary-profile",
                resources={"limits": {"nvidia.com/gpu": 1}},
                topology={"workers": 2},
                env=[
                    {"name": "API_TOKEN", "value": canary},
                    {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "canary-vault", "key": "api-key"}}},
                ],
                checkpoint={"bucket": "s3://canary-bucket/runs", "credentialsSecret": "canary-s3"},
            ),
            namespace,
        )

        def started() -> dict[str, Any] | None:
            obj = cluster.get("trainer", "canary", namespace)
            gates_open = all((condition(obj, g) or {}).get("status") == "True" for g in GATES)
            return obj if gates_open and obj.get("status", {}).get("phase") == "Running" else None

        eventually(started, what="every gate open and the run Running")
        # Something for each controller to have acted on and reported: a scale and a suspend.
        cluster.kubectl("scale", "trainer", "canary", "-n", namespace, "--replicas=1")
        cluster.kubectl(
            "patch",
            "trainer",
            "canary",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"runPolicy":{"suspend":true}}}',
        )
        eventually(
            lambda: cluster.get("trainer", "canary", namespace).get("status", {}).get("phase") == "Suspended",
            what="the run suspended",
        )

        seen: dict[str, str] = {
            "trainer status": json.dumps(cluster.get("trainer", "canary", namespace).get("status")),
            "events": cluster.kubectl("get", "events", "-n", namespace, "-o", "json"),
            "audit logs": cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"),
            "profile status": json.dumps(cluster.get("trainingprofile", "canary-profile", namespace).get("status")),
            "quota policy status": json.dumps(cluster.get("quotapolicy", policy).get("status")),
        }
        for controller in localdev.CONTROLLERS:
            seen[f"{controller} log"] = (localdev.state_dir() / "logs" / f"controller-{controller}.log").read_text(
                errors="replace"
            )
        leaks = [where for where, text in seen.items() if canary in text]
        assert leaks == [], f"the canary secret value leaked into: {leaks}"
        # The scan is not vacuous: the logs, Events, status and audit trail speak of this run.
        quiet = ("profile status", "quota policy status", "kubeflow log")  # no Kubeflow job in this test
        silent = [where for where, text in seen.items() if where not in quiet and "canary" not in text]
        assert silent == [], f"nothing about the run in: {silent}"
    finally:
        cluster.kubectl("delete", "quotapolicy", policy, "--ignore-not-found")
