"""A Kubeflow v1 job as the Trainer that carries it out, and what upstream refuses (pure)."""

import copy
import io
from typing import Any

import pytest
import yaml

from trainerop_common.api import TrainerSpec
from trainerop_kubeflow.cli import main
from trainerop_kubeflow.convert import problems, to_trainer
from trainerop_kubeflow.kinds import JOB_KINDS

PYTORCH, TF, JAX, XGBOOST = (JOB_KINDS[k] for k in ("PyTorchJob", "TFJob", "JAXJob", "XGBoostJob"))


def replica(container: str, replicas: int | None = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {"containers": [{"name": container, "image": "mnist:1", "command": ["python3", "mnist.py"]}]}
        },
        **extra,
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def job(kind: str, specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    field = JOB_KINDS[kind].specs_field
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "mnist", "namespace": "team-a", "uid": "uid-9"},
        "spec": {field: specs, **spec},
    }


# Upstream's examples/pytorch/simple.yaml, in shape: a Master and a Worker, OnFailure.
PYTORCH_SIMPLE = job(
    "PyTorchJob",
    {"Master": replica("pytorch", restartPolicy="OnFailure"), "Worker": replica("pytorch", restartPolicy="OnFailure")},
)


def test_a_pytorchjob_becomes_a_trainer_named_like_it_and_owned_by_it() -> None:
    trainer = to_trainer(PYTORCH, PYTORCH_SIMPLE)
    assert trainer["metadata"]["name"] == "mnist"
    assert trainer["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "mnist",
            "uid": "uid-9",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert trainer["metadata"]["labels"] == {"trainer.operator.kubeflow.org/kubeflow-job-kind": "PyTorchJob"}
    spec = TrainerSpec.model_validate(trainer["spec"])  # a valid Trainer
    assert (spec.framework, spec.image, spec.epochs) == ("pytorch", "mnist:1", None)
    assert (spec.topology.workers, spec.topology.master) == (1, 1)
    assert spec.run_policy.restart_policies == {"master": "OnFailure", "worker": "OnFailure"}
    assert spec.run_policy.clean_pod_policy == "None"  # upstream's default
    worker = trainer["spec"]["podTemplateOverrides"]["worker"]
    assert worker["spec"]["containers"][0]["command"] == ["python3", "mnist.py"]


@pytest.mark.parametrize(
    ("kind", "specs", "topology"),
    [
        (PYTORCH, {"Worker": replica("pytorch", 3)}, {"workers": 3, "master": 0}),  # worker 0 is the master
        (PYTORCH, {"Master": replica("pytorch")}, {"workers": 0, "master": 1}),  # one pod
        (TF, {"Worker": replica("tensorflow", 2)}, {"workers": 2, "master": 0}),
        (
            TF,
            {
                "Chief": replica("tensorflow"),
                "Worker": replica("tensorflow", 2),
                "PS": replica("tensorflow"),
                "Evaluator": replica("tensorflow"),
            },
            {"workers": 2, "master": 0, "parameterServers": 1, "chief": 1, "evaluators": 1},
        ),
        (JAX, {"Worker": replica("jax", None)}, {"workers": 1}),  # replicas unset: 1
        (XGBOOST, {"Master": replica("xgboost"), "Worker": replica("xgboost", 2)}, {"workers": 2}),
    ],
)
def test_replica_types_become_roles(kind: Any, specs: dict[str, Any], topology: dict[str, int]) -> None:
    trainer = to_trainer(kind, job(kind.kind, specs))
    assert trainer["spec"]["topology"] == topology
    TrainerSpec.model_validate(trainer["spec"])


def test_replica_types_are_read_case_aside_as_upstream_does() -> None:
    trainer = to_trainer(TF, job("TFJob", {"worker": replica("tensorflow", 2), "ps": replica("tensorflow")}))
    assert trainer["spec"]["topology"] == {"workers": 2, "master": 0, "parameterServers": 1}


def test_each_roles_restart_policy_is_its_own_or_the_kinds_default() -> None:
    specs = {"Worker": replica("tensorflow", 2, restartPolicy="ExitCode"), "PS": replica("tensorflow")}
    policy = to_trainer(TF, job("TFJob", specs, successPolicy="AllWorkers"))["spec"]["runPolicy"]
    assert policy["restartPolicies"] == {"worker": "ExitCode", "ps": "Never"}  # TFJob's default: Never
    assert policy["successPolicy"] == "AllWorkers"


def test_the_run_policy_carries_over() -> None:
    run_policy = {
        "cleanPodPolicy": "All",
        "backoffLimit": 3,
        "activeDeadlineSeconds": 600,
        "suspend": True,
    }
    written = {**run_policy, "ttlSecondsAfterFinished": 60}
    policy = to_trainer(PYTORCH, {**PYTORCH_SIMPLE, "spec": {**PYTORCH_SIMPLE["spec"], "runPolicy": written}})
    assert {k: policy["spec"]["runPolicy"][k] for k in run_policy} == run_policy
    assert "ttlSecondsAfterFinished" not in policy["spec"]["runPolicy"]  # the job's: it goes, and its Trainer


@pytest.mark.parametrize(
    ("scheduling_policy", "scheduling"),
    [
        ({"priorityClass": "high"}, {"priorityClassName": "high"}),
        # the whole job is admitted at once, and no pod holds capacity while it waits
        ({"minAvailable": 1, "queue": "default", "scheduleTimeoutSeconds": 30}, None),
        ({}, None),
    ],
)
def test_the_gangs_priority_class_becomes_the_runs_priority(
    scheduling_policy: dict[str, Any], scheduling: dict[str, str] | None
) -> None:
    written = {"runPolicy": {"schedulingPolicy": scheduling_policy}}
    spec = to_trainer(PYTORCH, {**PYTORCH_SIMPLE, "spec": {**PYTORCH_SIMPLE["spec"], **written}})["spec"]
    assert spec.get("scheduling") == scheduling
    TrainerSpec.model_validate(spec)


def test_the_template_is_the_roles_override_without_its_restart_policy() -> None:
    specs = copy.deepcopy(PYTORCH_SIMPLE["spec"]["pytorchReplicaSpecs"])
    specs["Worker"]["template"]["spec"]["restartPolicy"] = "Always"
    specs["Worker"]["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    override = to_trainer(PYTORCH, job("PyTorchJob", specs))["spec"]["podTemplateOverrides"]["worker"]
    assert "restartPolicy" not in override["spec"]
    assert override["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert specs["Worker"]["template"]["spec"]["restartPolicy"] == "Always"  # the job itself is untouched


def test_elastic_policy_port_and_processes_per_node() -> None:
    worker = replica("pytorch", 2)
    worker["template"]["spec"]["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 29400}]
    elastic = {"minReplicas": 1, "maxReplicas": 4, "rdzvId": "run-1", "maxRestarts": 3, "nProcPerNode": 2}
    spec = to_trainer(PYTORCH, job("PyTorchJob", {"Worker": worker}, elasticPolicy=elastic))["spec"]
    assert spec["topology"] == {"workers": 2, "elastic": {"minWorkers": 1, "maxWorkers": 4}}
    TrainerSpec.model_validate(spec)
    assert spec["port"] == 29400
    assert spec["nprocPerNode"] == "2"
    assert spec["env"] == [{"name": "PET_RDZV_ID", "value": "run-1"}, {"name": "PET_MAX_RESTARTS", "value": "3"}]


def test_a_rendezvous_host_or_port_of_the_elastic_policy_is_the_endpoint() -> None:
    spec = to_trainer(PYTORCH, job("PyTorchJob", {"Worker": replica("pytorch", 2)}, elasticPolicy={"rdzvPort": 3000}))
    assert {"name": "PET_RDZV_ENDPOINT", "value": "mnist-worker-0.mnist:3000"} in spec["spec"]["env"]


def test_a_profile_annotation_names_the_trainers_profile() -> None:
    annotated = copy.deepcopy(PYTORCH_SIMPLE)
    annotated["metadata"]["annotations"] = {"trainer.operator.kubeflow.org/profile": "gpu-a100"}
    assert to_trainer(PYTORCH, annotated)["spec"]["profile"] == "gpu-a100"


def _without_image(j: dict[str, Any]) -> None:
    del j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]


def _renamed_container(j: dict[str, Any]) -> None:
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"


@pytest.mark.parametrize(
    ("kind", "change", "expected"),
    [
        (
            PYTORCH,
            _without_image,
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required",
        ),
        (
            PYTORCH,
            _renamed_container,
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
            "container with name pytorch",
        ),
        (
            PYTORCH,
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2),
            "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1",
        ),
        (
            PYTORCH,
            lambda j: j["spec"]["pytorchReplicaSpecs"].update(Launcher=replica("pytorch")),
            "spec.pytorchReplicaSpecs[Launcher]: Unsupported value: 'Launcher': supported values: Master, Worker",
        ),
        (PYTORCH, lambda j: j["spec"].update(pytorchReplicaSpecs={}), "spec.pytorchReplicaSpecs: Required value"),
        (PYTORCH, lambda j: j["metadata"].update(name="x" * 51), "metadata.name: Invalid value"),
        (
            PYTORCH,
            lambda j: j["spec"].update(elasticPolicy={"minReplicas": 2}),  # no Master, one worker
            "spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 1: must lie within elasticPolicy's "
            "minReplicas (2) and maxReplicas (2)",
        ),
        (
            PYTORCH,
            lambda j: j["spec"].update(nprocPerNode="2", elasticPolicy={"nProcPerNode": 2}),
            "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode",
        ),
        (  # not upstream's: a Trainer's priority class names one of the QuotaPolicy's (63 at most)
            PYTORCH,
            lambda j: j["spec"].update(runPolicy={"schedulingPolicy": {"priorityClass": "p" * 64}}),
            "spec.runPolicy.schedulingPolicy.priorityClass: Invalid value: 'pppp",
        ),
    ],
)
def test_what_upstream_refuses_is_refused_in_its_words(kind: Any, change: Any, expected: str) -> None:
    broken = copy.deepcopy(PYTORCH_SIMPLE)
    change(broken)
    assert any(expected in p for p in problems(kind, broken)), problems(kind, broken)


@pytest.mark.parametrize(
    ("kind", "specs", "expected"),
    [
        (
            TF,
            {"Chief": replica("tensorflow"), "Master": replica("tensorflow"), "Worker": replica("tensorflow")},
            "spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role",
        ),
        (XGBOOST, {"Worker": replica("xgboost")}, "spec.xgbReplicaSpecs[Master]: Required value: must be present"),
        (
            JAX,
            {"Worker": {"template": {"spec": {}}}},
            "spec.jaxReplicaSpecs[Worker].template.spec.containers: Required value: must be specified",
        ),
    ],
)
def test_each_kinds_own_rules(kind: Any, specs: dict[str, Any], expected: str) -> None:
    assert expected in problems(kind, job(kind.kind, specs))


def test_the_upstream_examples_have_no_problems() -> None:
    assert problems(PYTORCH, PYTORCH_SIMPLE) == []
    assert problems(TF, job("TFJob", {"Worker": replica("tensorflow", 2)})) == []


def test_the_convert_command_prints_the_trainers_and_names_what_it_cannot_convert(tmp_path: Any) -> None:
    manifest = tmp_path / "jobs.yaml"
    no_uid = copy.deepcopy(PYTORCH_SIMPLE)
    del no_uid["metadata"]["uid"]
    manifest.write_text(yaml.safe_dump_all([no_uid, {"apiVersion": "v1", "kind": "ConfigMap"}]))
    out, err = io.StringIO(), io.StringIO()
    assert main(["-f", str(manifest)], out, err) == 1
    (trainer,) = yaml.safe_load_all(out.getvalue())
    assert trainer["kind"] == "Trainer"
    assert "ownerReferences" not in trainer["metadata"]
    assert "v1 ConfigMap: not a Kubeflow v1 job" in err.getvalue()
    assert main(["-f", str(tmp_path / "missing.yaml")], io.StringIO(), err) == 2
    assert "cannot read" in err.getvalue()
