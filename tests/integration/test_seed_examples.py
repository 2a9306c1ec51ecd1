"""The seed README's Trainer and TrainingProfile apply unmodified and are useful in kubectl get."""

from typing import Any

import pytest

from tests.harness import REPO, Cluster, condition, eventually, table
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.contracts import GATE_CONDITIONS, asks

SEED = REPO / "examples" / "seed"


def asked_gates(obj: dict[str, Any]) -> list[str]:
    """The gates a Trainer of this spec waits for (every concern is deployed here)."""
    spec = TrainerSpec.model_validate(obj["spec"])
    return [gate for concern, gate in GATE_CONDITIONS.items() if asks(spec, concern)]


def is_converged(obj: dict[str, Any]) -> bool:
    """Every gate the spec asks is True for the current generation, the pods exist and the audit
    is recorded."""
    generation = obj["metadata"]["generation"]
    for gate in asked_gates(obj):
        cond = condition(obj, gate)
        if not cond or cond["status"] != "True" or cond["observedGeneration"] != generation:
            return False
    audit = obj.get("status", {}).get("audit", {})
    return condition(obj, "Created").get("status") == "True" and audit.get("records", 0) >= 1


def converged(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj = cluster.get("trainer", name, namespace)
    return obj if is_converged(obj) else None


@pytest.mark.smoke
def test_seed_trainer_and_profile_apply_unmodified(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl(
        "apply", "-n", namespace, "-f", str(SEED / "trainer.yaml"), "-f", str(SEED / "trainingprofile.yaml")
    )
    obj = eventually(lambda: converged(cluster, namespace, "llama-7b-finetune"), what="every controller to report")

    assert obj["spec"]["resources"]["requests"] == {"cpu": 20, "memory": "40Gi"}
    assert obj["spec"]["topology"] == {"workers": 4, "parameterServers": 1, "replicationFactor": 1}
    # API-server defaults make the stored object say what will happen.
    assert obj["spec"]["framework"] == "generic"
    assert obj["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert "restartPolicy" not in obj["spec"]["runPolicy"]  # unset: a profile's retryPolicy may fill it
    status = obj["status"]
    assert status["phase"] in ("Pending", "Running")
    assert status["topology"]["selector"] == (
        "trainer-name=llama-7b-finetune,trainer.operator.kubeflow.org/replica-type=worker"
    )
    assert not condition(obj, "ProfileResolved")  # no spec.profile: the profile concern says nothing
    assert "profile" not in status
    assert condition(obj, "QuotaAdmitted")["reason"] == "NoQuotaPolicy"
    assert condition(obj, "CheckpointReady")["reason"] == "NoCheckpointYet"

    profile = eventually(
        lambda: (
            (p := cluster.get("trainingprofile", "cost-optimized-32gpu", namespace)) and condition(p, "Valid") and p
        ),
        what="the profile to be marked valid",
    )
    assert profile["spec"]["retryPolicy"] == {"backoffLimit": 5, "restartPolicy": "OnFailure"}

    records = cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "name").split()
    assert sum("/llama-7b-finetune-created-" in r for r in records) == 1
    # The Trainer's creation and what the operator did, and the profile's creation (and the seals
    # that chain the namespace's records, every --seal-seconds).
    expected = ("/llama-7b-finetune-", "/cost-optimized-32gpu-created-", "/audit-seal-")
    assert all(any(part in r for part in expected) for r in records), records


def test_kubectl_get_shows_what_the_trainer_is_doing(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(SEED / "trainer.yaml"))
    eventually(lambda: converged(cluster, namespace, "llama-7b-finetune"), what="every controller to report")

    # The seed Trainer's pods fill five whole nodes: while an earlier test's deleted namespace still
    # holds GPUs they are Unschedulable, and the reason says so; then it follows the phase.
    reasons = {"Pending": "Starting", "Running": "Running"}

    def shown() -> list[dict[str, str]] | None:
        rows = table(cluster.kubectl("get", "trainers", "-n", namespace))
        return rows if rows and reasons.get(rows[0]["PHASE"]) == rows[0]["REASON"] else None

    rows = eventually(shown, what="the reason to follow the phase once the pods have room")
    assert list(rows[0]) == [
        "NAME",
        "FRAMEWORK",
        "WORKERS",
        "READY",
        "PHASE",
        "PROGRESS",
        "ETA",
        "RESTARTS",
        "CHECKPOINT",
        "REASON",
        "AGE",
    ]
    row = rows[0]
    assert row["NAME"] == "llama-7b-finetune"
    assert row["WORKERS"] == "4"
    assert row["PHASE"] in ("Pending", "Running")
    assert row["REASON"] == reasons[row["PHASE"]]  # the reason follows the phase
    assert row["PROGRESS"] == "0"  # no heartbeat from kwok's pods

    wide = cluster.kubectl("get", "trainers", "-n", namespace, "-o", "wide").splitlines()[0]
    for column in ("MESSAGE", "EPOCH", "PROFILE", "QUOTA"):
        assert column in wide

    # Short names and the category work like built-in kinds.
    assert "llama-7b-finetune" in cluster.kubectl("get", "tr", "-n", namespace)
    listing = cluster.kubectl("get", "trainer-operator", "-n", namespace)
    assert "trainer.trainer.operator.kubeflow.org/llama-7b-finetune" in listing
    assert "auditlog.trainer.operator.kubeflow.org/llama-7b-finetune-created-" in listing
