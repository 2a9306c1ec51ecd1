"""What the audit webhook records for each kind of user request (a table over AdmissionReviews)."""

import copy
from typing import Any

import pytest

from tests.factories import trainer_body
from trainerop_audit.user_actions import changed_paths, observe
from trainerop_common.api import AuditLog

NOW = "2026-11-30T01:02:03.456789Z"
ALICE = {"username": "alice", "uid": "u-1", "groups": ["team-a", "system:authenticated"]}
TRAINER = trainer_body(
    "llama",
    "team-a",
    uid="0123456789abcdef",
    epochs=3,
    image="x",
    topology={"workers": 2},
    env=[{"name": "API_TOKEN", "value": "canary"}],
)


def review(
    operation: str, obj: Any = None, old: Any = None, resource: str = "trainers", **extra: Any
) -> dict[str, Any]:
    request = {
        "uid": "7f0c1c5e-0000-4000-8000-000000000001",
        "resource": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "resource": resource},
        "namespace": "team-a",
        "name": "llama",
        "operation": operation,
        "userInfo": ALICE,
        "object": obj,
        "oldObject": old,
        **extra,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def changed(**spec: Any) -> dict[str, Any]:
    new = copy.deepcopy(TRAINER)
    new["spec"].update(spec)
    new["metadata"]["generation"] = 2
    return new


def observed(r: dict[str, Any]) -> dict[str, Any]:
    record = observe(r, NOW, "trainer-operator-system", "system:serviceaccount:trainer-operator-system:x")
    assert record is not None
    AuditLog.model_validate(record)
    return record


def test_create_is_recorded_with_the_users_identity_in_the_audit_event_shape() -> None:
    record = observed(review("CREATE", TRAINER))
    assert record["metadata"] == {
        "name": "llama-created-01234567",
        "namespace": "team-a",
        "labels": {
            "trainer.operator.kubeflow.org/audited-resource": "trainers",
            "trainer.operator.kubeflow.org/trainer-name": "llama",
            "trainer.operator.kubeflow.org/trainer-uid": "0123456789abcdef",
        },
    }
    spec = record["spec"]
    assert spec["auditID"] == "7f0c1c5e-0000-4000-8000-000000000001"
    assert (spec["verb"], spec["stage"], spec["action"], spec["level"]) == (
        "create",
        "RequestReceived",
        "Created",
        "Metadata",
    )
    assert spec["user"] == ALICE
    assert spec["objectRef"] == {
        "resource": "trainers",
        "namespace": "team-a",
        "name": "llama",
        "uid": "0123456789abcdef",
        "apiGroup": "trainer.operator.kubeflow.org",
        "apiVersion": "v1alpha1",
    }
    assert spec["requestReceivedTimestamp"] == spec["stageTimestamp"] == NOW
    assert spec["message"] == "alice created Trainer llama"
    assert "canary" not in str(record), "a record holds no values of the object"


@pytest.mark.parametrize(
    ("new", "action", "details"),
    [
        (changed(epochs=5), "Updated", {"changed": "spec.epochs"}),
        (changed(topology={"workers": 4}), "Scaled", {"changed": "spec.topology.workers", "from": "2", "to": "4"}),
        (changed(runPolicy={"suspend": True}), "Suspended", {"changed": "spec.runPolicy"}),
        (changed(env=[{"name": "API_TOKEN", "value": "other"}]), "Updated", {"changed": "spec.env"}),
    ],
)
def test_updates_are_named_by_what_they_change(new: dict[str, Any], action: str, details: dict[str, str]) -> None:
    record = observed(review("UPDATE", new, TRAINER))
    assert (record["spec"]["action"], record["spec"]["verb"]) == (action, "update")
    assert record["spec"]["details"] == details
    assert record["spec"]["generation"] == 2
    assert "canary" not in str(record)
    assert "other" not in str(record)


def test_resume_is_recorded() -> None:
    suspended = changed(runPolicy={"suspend": True})
    assert observed(review("UPDATE", changed(runPolicy={"suspend": False}), suspended))["spec"]["action"] == "Resumed"


def test_label_changes_are_updates_but_bookkeeping_is_not_recorded() -> None:
    labelled = copy.deepcopy(TRAINER)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert observed(review("UPDATE", labelled, TRAINER))["spec"]["details"] == {"changed": "metadata.labels.team"}
    bookkeeping = copy.deepcopy(TRAINER)
    bookkeeping["metadata"]["finalizers"] = ["x"]
    bookkeeping["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    assert observe(review("UPDATE", bookkeeping, TRAINER), NOW, "ops", None) is None


def test_scale_subresource_records_from_and_to() -> None:
    def scale(n: int) -> dict[str, Any]:
        meta = {"name": "llama", "namespace": "team-a", "uid": "0123456789abcdef"}
        return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta, "spec": {"replicas": n}}

    record = observed(review("UPDATE", scale(4), scale(2), subResource="scale"))
    assert (record["spec"]["action"], record["spec"]["details"]) == ("Scaled", {"from": "2", "to": "4"})
    assert record["spec"]["objectRef"]["subresource"] == "scale"
    assert record["spec"]["message"] == "alice scaled Trainer llama from 2 to 4"
    assert observe(review("UPDATE", scale(2), scale(2), subResource="scale"), NOW, "ops", None) is None


def test_delete_reads_the_old_object() -> None:
    record = observed(review("DELETE", None, TRAINER))
    assert (record["spec"]["action"], record["spec"]["verb"]) == ("Deleted", "delete")
    assert record["spec"]["objectRef"]["uid"] == "0123456789abcdef"
    assert record["metadata"]["name"].startswith("llama-deleted-")


def test_profiles_are_recorded_and_cluster_scoped_ones_go_to_the_operator_namespace() -> None:
    profile = {"metadata": {"name": "gpu", "namespace": "team-a", "uid": "p-1"}, "spec": {"env": []}}
    record = observed(review("CREATE", profile, resource="trainingprofiles", name="gpu"))
    assert record["spec"]["objectRef"]["resource"] == "trainingprofiles"
    assert record["metadata"]["labels"] == {"trainer.operator.kubeflow.org/audited-resource": "trainingprofiles"}
    assert record["spec"]["message"] == "alice created TrainingProfile gpu"
    cluster = {"metadata": {"name": "gpu", "uid": "p-2"}, "spec": {}}
    r = review("DELETE", None, cluster, resource="clustertrainingprofiles", name="gpu")
    del r["request"]["namespace"]
    record = observed(r)
    assert record["metadata"]["namespace"] == "trainer-operator-system"
    assert "namespace" not in record["spec"]["objectRef"]


def test_deleting_an_audit_record_is_recorded_unless_retention_did_it() -> None:
    old = {"metadata": {"name": "llama-started-1234abcd", "namespace": "team-a", "uid": "a-1"}}
    r = review("DELETE", None, old, resource="auditlogs", name=old["metadata"]["name"])
    assert observed(r)["spec"]["action"] == "Deleted"
    assert observe(r, NOW, "ops", "alice") is None  # the controller's own retention: recorded by it
    r["request"]["userInfo"] = {"username": "system:serviceaccount:kube-system:namespace-controller"}
    assert observe(r, NOW, "ops", None) is None  # the namespace is going, and its records with it


@pytest.mark.parametrize(
    "r",
    [
        review("CREATE", TRAINER, dryRun=True),
        review("CONNECT", TRAINER),
        review("CREATE", TRAINER, resource="pods"),
        review("UPDATE", changed(epochs=9), TRAINER, subResource="status"),  # no status change
        review("CREATE", {"metadata": {"name": "x"}}, resource="auditlogs"),
    ],
)
def test_nothing_is_recorded_for(r: dict[str, Any]) -> None:
    assert observe(r, NOW, "ops", None) is None


def test_changed_paths_name_fields_never_values() -> None:
    assert changed_paths({"a": {"b": 1, "c": [1]}}, {"a": {"b": 2, "c": [1]}, "d": "secret"}, "spec") == [
        "spec.a.b",
        "spec.d",
    ]
    assert changed_paths(1, 1, "spec") == []


def test_a_status_write_by_someone_other_than_the_operator_is_recorded() -> None:
    faked = copy.deepcopy(TRAINER)
    faked["status"] = {"phase": "Succeeded"}
    record = observed(review("UPDATE", faked, TRAINER, subResource="status"))
    assert (record["spec"]["action"], record["spec"]["details"]) == ("Updated", {"changed": "status"})
    assert record["spec"]["objectRef"]["subresource"] == "status"


def test_a_user_in_very_many_groups_still_gets_a_valid_record() -> None:
    r = review("CREATE", TRAINER)
    r["request"]["userInfo"] = {"username": "bob", "groups": [f"group-{i}-" + "x" * 300 for i in range(200)]}
    groups = observed(r)["spec"]["user"]["groups"]  # observed() validates against the CRD's model
    assert len(groups) == 64
    assert all(len(g) == 256 for g in groups)


PYTORCHJOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "mnist", "namespace": "team-a", "uid": "9876543210fedcba", "generation": 1},
    "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}},
}


def job_review(operation: str, obj: Any = None, old: Any = None, **extra: Any) -> dict[str, Any]:
    r = review(operation, obj, old, resource="pytorchjobs", name="mnist", **extra)
    r["request"]["resource"] = {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"}
    return r


def test_a_pytorchjobs_creation_is_recorded_like_a_trainers_in_its_own_api_group() -> None:
    spec = observed(job_review("CREATE", PYTORCHJOB))["spec"]
    assert (spec["action"], spec["verb"], spec["reason"]) == ("Created", "create", "PyTorchJobCreated")
    assert spec["user"] == ALICE
    assert spec["objectRef"] == {
        "resource": "pytorchjobs",
        "namespace": "team-a",
        "name": "mnist",
        "uid": "9876543210fedcba",
        "apiGroup": "kubeflow.org",
        "apiVersion": "v1",
    }
    assert spec["message"] == "alice created PyTorchJob mnist"


# Of a Kubeflow job, what the webhook is sent (its rules: CREATE, DELETE) and nothing else is recorded.
@pytest.mark.parametrize(
    ("r", "action"),
    [
        (job_review("CREATE", PYTORCHJOB), "Created"),
        (job_review("DELETE", None, PYTORCHJOB), "Deleted"),
        (job_review("UPDATE", {**PYTORCHJOB, "spec": {}}, PYTORCHJOB), None),  # edits: the job, not the trail
        (job_review("CREATE", PYTORCHJOB, dryRun=True), None),
    ],
)
def test_what_of_a_kubeflow_job_is_recorded(r: dict[str, Any], action: str | None) -> None:
    record = observe(r, NOW, "ops", None)
    assert (record["spec"]["action"] if record else None) == action
    if record:
        assert record["metadata"]["labels"] == {"trainer.operator.kubeflow.org/audited-resource": "pytorchjobs"}
