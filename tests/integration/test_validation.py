"""Bad input is rejected by the API server itself, with a message that says what to fix."""

import copy
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.harness import REPO, Cluster, KubectlError

SEED_TRAINER: dict[str, Any] = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
SEED_PROFILE: dict[str, Any] = yaml.safe_load((REPO / "examples" / "seed" / "trainingprofile.yaml").read_text())


def edit(base: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    change(obj)
    return obj


def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        for key in parents:
            obj = obj.setdefault(key, {})
        obj[leaf] = value

    return change


def drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        for key in parents:
            obj = obj[key]
        del obj[leaf]

    return change


CHECKPOINT: dict[str, Any] = {
    "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
    "kind": "Checkpoint",
    "metadata": {"name": "t-step-1"},
    "spec": {
        "trainer": "t",
        "epoch": 0,
        "step": 1,
        "path": "s3://b/ns/t/step-0000000001",
        "shardCount": 1,
        "replicationFactor": 1,
        "shards": [{"index": 0, "sha256": "a" * 64, "size": 1, "copies": ["shard-00000/copy-0"]}],
    },
}

CASES = [
    (
        "s3 bucket without credentials",
        SEED_TRAINER,
        set_path("spec.checkpoint.bucket", "s3://ckpt/runs"),
        ["checkpoint.credentialsSecret is required for an s3:// bucket"],
    ),
    (
        "bucket neither PVC nor s3",
        SEED_TRAINER,
        set_path("spec.checkpoint.bucket", "gs://ckpt/runs"),
        ["bucket must be a PersistentVolumeClaim name or s3://bucket/prefix"],
    ),
    (
        "s3 prefix that climbs out of itself",
        SEED_TRAINER,
        lambda t: t["spec"]["checkpoint"].update(bucket="s3://ckpt/../other", credentialsSecret="creds"),
        ["bucket must be a PersistentVolumeClaim name or s3://bucket/prefix", "not starting with '.'"],
    ),
    (
        "more shard writers than a Checkpoint holds",
        SEED_TRAINER,
        set_path("spec.topology", {"workers": 2000}),
        ["at most 1024 replicas that write a checkpoint shard", "lower topology.workers"],
    ),
    (
        "checkpoint copy outside its path",
        CHECKPOINT,
        set_path("spec.shards", [{"index": 0, "sha256": "a" * 64, "size": 1, "copies": ["../other/copy-0"]}]),
        ["spec.shards[0].copies[0]", "should match"],
    ),
    (
        "checkpoint shard beyond its count",
        CHECKPOINT,
        set_path("spec.shards", [{"index": 3, "sha256": "a" * 64, "size": 1, "copies": ["shard-00003/copy-0"]}]),
        ["a shard's index must be below shardCount"],
    ),
    (
        "zero workers",
        SEED_TRAINER,
        set_path("spec.topology.workers", 0),
        ["spec.topology.workers", "at least 1 in a run without a master or a chief"],
    ),
    (
        "negative workers",
        SEED_TRAINER,
        set_path("spec.topology.workers", -2),
        ["spec.topology.workers", "greater than or equal to 0"],
    ),
    ("negative epochs", SEED_TRAINER, set_path("spec.epochs", -1), ["spec.epochs", "greater than or equal to 1"]),
    ("missing image", SEED_TRAINER, drop("spec.image"), ["spec.image", "Required value"]),
    ("empty image", SEED_TRAINER, set_path("spec.image", ""), ["spec.image", "at least 1 chars long"]),
    (
        "unknown framework",
        SEED_TRAINER,
        set_path("spec.framework", "caffe"),
        ["spec.framework", 'Unsupported value: "caffe"', '"pytorch"'],
    ),
    (
        "maxRetention 0",
        SEED_TRAINER,
        set_path("spec.checkpoint.maxRetention", 0),
        ["spec.checkpoint.maxRetention", "greater than or equal to 1"],
    ),
    (
        "malformed memory",
        SEED_TRAINER,
        set_path("spec.resources.requests.memory", "40GB"),
        ["spec.resources.requests.memory", "should match"],
    ),
    (
        "negative cpu",
        SEED_TRAINER,
        set_path("spec.resources.requests.cpu", "-2"),
        ["spec.resources.requests.cpu", "should match"],
    ),
    (
        "over-long name",
        SEED_TRAINER,
        set_path("metadata.name", "a" * 51),
        ["metadata.name must be at most 50 characters"],
    ),
    ("name not a DNS label", SEED_TRAINER, set_path("metadata.name", "9lives"), ["must start with a letter"]),
    (
        "elastic bounds reversed",
        SEED_TRAINER,
        set_path("spec.topology.elastic", {"minWorkers": 5, "maxWorkers": 2}),
        ["elastic.minWorkers must not exceed elastic.maxWorkers"],
    ),
    (
        "workers outside the elastic bounds",
        SEED_TRAINER,
        set_path("spec.topology.elastic", {"minWorkers": 1, "maxWorkers": 2}),
        ["topology.workers must lie within topology.elastic's minWorkers and maxWorkers"],
    ),
    (
        "elastic jax",
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "framework": "jax", "topology": {"workers": 2}}},
        set_path("spec.topology.elastic", {"minWorkers": 1, "maxWorkers": 4}),
        ["topology.elastic: jax, tensorflow and xgboost read their world size once at start"],
    ),
    (
        "pytorch with parameter servers",
        SEED_TRAINER,
        set_path("spec.framework", "pytorch"),
        ["topology.parameterServers must be 0 for pytorch"],
    ),
    (
        "a master for jax",
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "framework": "jax", "topology": {"workers": 2}}},
        set_path("spec.topology.master", 1),
        ["topology.master must be 0 for jax"],
    ),
    (
        "xgboost without its master",
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "framework": "xgboost", "topology": {"workers": 2}}},
        set_path("spec.topology.master", 0),
        ["topology.master must be 1 for xgboost"],
    ),
    (
        "a chief and a master",
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "framework": "tensorflow"}},
        set_path("spec.topology", {"workers": 2, "master": 1, "chief": 1}),
        ["must not have more than 1 Chief or Master role"],
    ),
    (
        "a chief for pytorch",
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "framework": "pytorch", "topology": {"workers": 2}}},
        set_path("spec.topology.chief", 1),
        ["topology.chief and topology.evaluators are roles of tensorflow"],
    ),
    (
        "no workers and no master",
        {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "framework": "tensorflow"}},
        set_path("spec.topology", {"workers": 0}),
        ["topology.workers must be at least 1 in a run without a master or a chief"],
    ),
    (
        "a role's unknown restart policy",
        SEED_TRAINER,
        set_path("spec.runPolicy.restartPolicies", {"driver": "Never"}),
        ["restartPolicies: each key must be a role"],
    ),
    ("unknown field", SEED_TRAINER, set_path("spec.wrokers", 3), ['unknown field "spec.wrokers"']),
    (
        "profile restart policy",
        SEED_PROFILE,
        set_path("spec.retryPolicy.restartPolicy", "Sometimes"),
        ["spec.retryPolicy.restartPolicy", 'Unsupported value: "Sometimes"'],
    ),
    (
        "secret-looking literal in a profile",
        SEED_PROFILE,
        set_path("spec.envVars", [{"name": "HF_TOKEN", "value": "hf_abc"}]),
        ["must not have a literal value", "use valueFrom.secretKeyRef"],
    ),
    (
        "profile in another namespace",
        SEED_TRAINER,
        set_path("spec.profile", "team-b/gpu"),
        ["spec.profile"],
    ),
    (
        "a model source without a revision",
        SEED_TRAINER,
        set_path("spec.model", {"source": "hf://acme/llama", "cacheClaim": "models"}),
        ["spec.model.source", "should match '^(hf://"],
    ),
    (
        "an S3 model without credentials",
        SEED_TRAINER,
        set_path("spec.model", {"source": "s3://models/llama", "cacheClaim": "models"}),
        ["spec.model", "an s3:// source needs credentialsSecret"],
    ),
    (
        "a Hub model with S3 credentials",
        SEED_TRAINER,
        set_path("spec.model", {"source": "hf://acme/llama@main", "cacheClaim": "models", "credentialsSecret": "s3"}),
        ["credentialsSecret is for s3:// sources"],
    ),
    (
        "an S3 model with a Hub token",
        SEED_TRAINER,
        set_path(
            "spec.model",
            {"source": "s3://models/llama", "cacheClaim": "models", "credentialsSecret": "s3", "tokenSecret": "hf"},
        ),
        ["tokenSecret is for hf:// sources"],
    ),
    (
        "a model without a cache claim",
        SEED_TRAINER,
        set_path("spec.model", {"source": "hf://acme/llama@main"}),
        ["spec.model.cacheClaim: Required value"],
    ),
    (
        "relative secret mount",
        SEED_PROFILE,
        set_path("spec.runtimeConfig.mountPath", "etc/secrets"),
        ["spec.runtimeConfig.mountPath"],
    ),
]


@pytest.mark.smoke
@pytest.mark.parametrize(("base", "change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_with_a_useful_message(
    cluster: Cluster,
    namespace: str,
    base: dict[str, Any],
    change: Callable[[dict[str, Any]], None],
    expected: list[str],
) -> None:
    obj = edit(base, change)
    with pytest.raises(KubectlError) as rejected:
        cluster.apply(obj, namespace)
    for fragment in expected:
        assert fragment in rejected.value.stderr
    kind = obj["kind"].lower()
    assert obj["metadata"]["name"] not in cluster.names(kind, namespace)


def test_kubectl_scale_stays_within_the_elastic_bounds(cluster: Cluster, namespace: str) -> None:
    elastic = edit(SEED_TRAINER, set_path("spec.topology.elastic", {"minWorkers": 2, "maxWorkers": 6}))
    cluster.apply(elastic, namespace)
    name = elastic["metadata"]["name"]
    cluster.kubectl("scale", "trainer", name, "-n", namespace, "--replicas=6")
    with pytest.raises(KubectlError) as refused:
        cluster.kubectl("scale", "trainer", name, "-n", namespace, "--replicas=7")
    assert "topology.workers must lie within topology.elastic's minWorkers and maxWorkers" in refused.value.stderr
    assert cluster.get("trainer", name, namespace)["spec"]["topology"]["workers"] == 6


def test_framework_is_immutable(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_TRAINER, namespace)
    with pytest.raises(KubectlError) as rejected:
        cluster.apply(edit(SEED_TRAINER, set_path("spec.framework", "tensorflow")), namespace)
    assert "framework is immutable" in rejected.value.stderr


def test_model_is_immutable(cluster: Cluster, namespace: str) -> None:
    model = {"source": "hf://acme/llama@main", "cacheClaim": "models"}
    cluster.apply(edit(SEED_TRAINER, set_path("spec.model", model)), namespace)
    with pytest.raises(KubectlError) as rejected:
        cluster.apply(edit(SEED_TRAINER, set_path("spec.model", model | {"source": "hf://acme/llama@v2"})), namespace)
    assert "model is immutable" in rejected.value.stderr


def test_audit_records_are_immutable(cluster: Cluster, namespace: str) -> None:
    record = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "AuditLog",
        "metadata": {"name": "manual-record"},
        "spec": {
            "auditID": "00000000-0000-4000-8000-000000000000",
            "stage": "ResponseComplete",
            "verb": "patch",
            "user": {"username": "admin"},
            "objectRef": {"resource": "trainers", "name": "x"},
            "requestReceivedTimestamp": "2026-01-01T00:00:00Z",
            "stageTimestamp": "2026-01-01T00:00:00Z",
            "action": "Started",
        },
    }
    cluster.apply(record, namespace)
    with pytest.raises(KubectlError) as rejected:
        cluster.apply(edit(record, set_path("spec.verb", "update")), namespace)
    assert "AuditLog records are immutable" in rejected.value.stderr


def test_a_valid_edit_of_the_seed_is_accepted(cluster: Cluster, namespace: str) -> None:
    """The table above fails for the reason it names, not because the base object is broken."""
    cluster.apply(edit(SEED_TRAINER, set_path("spec.framework", "tensorflow")), namespace)
    cluster.apply(SEED_PROFILE, namespace)
    stored = cluster.get("trainer", SEED_TRAINER["metadata"]["name"], namespace)
    assert stored["spec"]["framework"] == "tensorflow"
    asked = SEED_TRAINER["spec"]["checkpoint"]
    assert {k: stored["spec"]["checkpoint"][k] for k in asked} == asked
    assert cluster.get("trainingprofile", SEED_PROFILE["metadata"]["name"], namespace)["spec"] == SEED_PROFILE["spec"]


def test_a_misspelt_field_is_refused_by_kubectl_and_warned_about_to_a_lenient_client(
    cluster: Cluster, namespace: str
) -> None:
    """A typo outside the free-form overrides: kubectl (strict field validation, its default)
    refuses it; a client that asks for no validation gets the API server's warning, never a
    silent drop; one inside podTemplateOverrides is refused by the trainer's webhook (only
    known fields are allowed there)."""
    typo = edit(SEED_TRAINER, set_path("spec.epochz", 3))
    with pytest.raises(KubectlError, match=r'unknown field "spec.epochz"'):
        cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(typo))
    lenient = subprocess.run(
        [
            str(cluster.kubectl_bin),
            f"--kubeconfig={cluster.kubeconfig}",
            "create",
            "--validate=warn",
            "-n",
            namespace,
            "-f",
            "-",
        ],
        input=yaml.safe_dump(typo),
        capture_output=True,
        text=True,
        check=True,
    )
    assert 'unknown field "spec.epochz"' in lenient.stderr
    inside = edit(SEED_TRAINER, set_path("spec.podTemplateOverrides.worker.spec.nodeSelecter", {"gpu": "a100"}))
    inside["metadata"]["name"] = "typo-inside"
    with pytest.raises(KubectlError, match=r"spec.podTemplateOverrides.worker.spec.nodeSelecter: not allowed"):
        cluster.apply(inside, namespace)
