"""Framework env contracts: the values Kubeflow's Training Operator v1 sets for the same topology."""

import json
from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_common.api.trainer import TrainerSpec
from trainerop_trainer.topology import Replica, framework_env, operator_env, rendezvous, replicas


def spec(framework: str, workers: int = 2, ps: int = 0, **extra: Any) -> TrainerSpec:
    topology = {"workers": workers, "parameterServers": ps, **extra}
    return trainer_spec(epochs=3, image="img", framework=framework, topology=topology)


@pytest.mark.parametrize(
    ("framework", "workers", "ps", "names"),
    [
        ("pytorch", 2, 0, ["j-master-0", "j-worker-0", "j-worker-1"]),
        ("xgboost", 1, 0, ["j-master-0", "j-worker-0"]),
        ("tensorflow", 2, 1, ["j-worker-0", "j-worker-1", "j-ps-0"]),
        ("jax", 3, 0, ["j-worker-0", "j-worker-1", "j-worker-2"]),
        ("generic", 4, 1, ["j-worker-0", "j-worker-1", "j-worker-2", "j-worker-3", "j-ps-0"]),
    ],
)
def test_replicas_per_framework(framework: str, workers: int, ps: int, names: list[str]) -> None:
    assert [r.name("j") for r in replicas(spec(framework, workers, ps))] == names


@pytest.mark.parametrize(
    ("replica", "expected"),
    [
        (
            Replica("master", 0),
            {
                "MASTER_ADDR": "j-master-0.j",
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "3",
                "RANK": "0",
                "PET_MASTER_ADDR": "j-master-0.j",
                "PET_MASTER_PORT": "23456",
                "PET_NODE_RANK": "0",
                "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "auto",
                "PYTHONUNBUFFERED": "0",
            },
        ),
        (
            Replica("worker", 1),
            {
                "MASTER_ADDR": "j-master-0.j",
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "3",
                "RANK": "2",
                "PET_MASTER_ADDR": "j-master-0.j",
                "PET_MASTER_PORT": "23456",
                "PET_NODE_RANK": "2",
                "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "auto",
                "PYTHONUNBUFFERED": "0",
            },
        ),
    ],
)
def test_pytorch(replica: Replica, expected: dict[str, str]) -> None:
    assert framework_env("j", "ns", spec("pytorch"), replica) == expected


def test_elastic_pytorch_uses_c10d_rendezvous_on_worker_0_without_a_master() -> None:
    s = spec("pytorch", workers=3, elastic={"minWorkers": 2, "maxWorkers": 5})
    assert [r.role for r in replicas(s)] == ["worker"] * 3
    env = framework_env("j", "ns", s, Replica("worker", 2))
    assert env == {
        "PYTHONUNBUFFERED": "0",
        "PET_NPROC_PER_NODE": "auto",  # as Kubeflow v1 defaults it for an elastic job too
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "j-worker-0.j:23456",
        "PET_NNODES": "2:5",
    }
    # worker 0 hosts the store: its own name may not resolve to it yet when it starts
    assert framework_env("j", "ns", s, Replica("worker", 0))["PET_RDZV_ENDPOINT"] == "localhost:23456"


def test_tensorflow_tf_config() -> None:
    env = framework_env("j", "team-a", spec("tensorflow", 2, 1), Replica("ps", 0))
    assert env["TF_CONFIG"] == (
        '{"cluster":{"ps":["j-ps-0.j.team-a.svc:2222"],'
        '"worker":["j-worker-0.j.team-a.svc:2222","j-worker-1.j.team-a.svc:2222"]},'
        '"task":{"type":"ps","index":0},"environment":"cloud"}'
    )
    assert json.loads(framework_env("j", "n", spec("tensorflow", 2), Replica("worker", 1))["TF_CONFIG"])["task"] == {
        "type": "worker",
        "index": 1,
    }
    assert framework_env("j", "n", spec("tensorflow", 1), Replica("worker", 0)) == {}  # not distributed


def test_jax() -> None:
    assert framework_env("j", "ns", spec("jax", 3), Replica("worker", 2)) == {
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "j-worker-0.j",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "3",
        "PROCESS_ID": "2",
    }


def test_xgboost() -> None:
    assert framework_env("j", "ns", spec("xgboost", 2), Replica("worker", 0)) == {
        "MASTER_ADDR": "j-master-0.j",
        "MASTER_PORT": "9999",
        "WORLD_SIZE": "3",
        "RANK": "1",
        "PYTHONUNBUFFERED": "0",
        "WORKER_PORT": "9999",
        "WORKER_ADDRS": "j-worker-0.j,j-worker-1.j",
    }


def test_generic_gets_only_the_operator_contract() -> None:
    s = trainer_spec(epochs=10, image="i", checkpoint={"bucket": "b"})
    assert framework_env("j", "ns", s, Replica("worker", 0)) == {}
    assert operator_env("j", "uid-7", s, Replica("ps", 0)) == {
        "TRAINER_NAME": "j",
        "TRAINER_UID": "uid-7",
        "REPLICA_TYPE": "ps",
        "REPLICA_INDEX": "0",
        "EPOCHS": "10",
        "CHECKPOINT_SHARDS": "1",  # it checkpoints: one worker writes a shard
    }


@pytest.mark.parametrize(
    ("framework", "replica", "target"),
    [
        ("pytorch", Replica("worker", 3), "j-master-0.j"),
        ("pytorch", Replica("master", 0), None),
        ("xgboost", Replica("worker", 0), "j-master-0.j"),
        ("jax", Replica("worker", 1), "j-worker-0.j"),
        ("jax", Replica("worker", 0), None),
        ("tensorflow", Replica("worker", 1), None),
        ("generic", Replica("worker", 1), None),
    ],
)
def test_rendezvous(framework: str, replica: Replica, target: str | None) -> None:
    assert rendezvous("j", spec(framework), replica) == target


@pytest.mark.parametrize(
    ("framework", "extra", "names"),
    [
        ("pytorch", {"master": 0}, ["j-worker-0", "j-worker-1"]),  # a PyTorchJob of Workers only
        ("tensorflow", {"chief": 1, "evaluators": 1}, ["j-worker-0", "j-worker-1", "j-chief-0", "j-evaluator-0"]),
        ("tensorflow", {"master": 1}, ["j-master-0", "j-worker-0", "j-worker-1"]),  # TFJob's legacy Master
        ("generic", {"master": 1}, ["j-master-0", "j-worker-0", "j-worker-1"]),
    ],
)
def test_the_roles_a_kubeflow_job_can_have(framework: str, extra: dict[str, int], names: list[str]) -> None:
    assert [r.name("j") for r in replicas(spec(framework, 2, **extra))] == names


def test_pytorch_without_a_master_makes_worker_0_the_master_and_ranks_the_workers_by_index() -> None:
    s = spec("pytorch", workers=3, master=0)
    env = framework_env("j", "ns", s, Replica("worker", 2))
    assert (env["MASTER_ADDR"], env["RANK"], env["WORLD_SIZE"], env["PET_NNODES"]) == ("j-worker-0.j", "2", "3", "3")
    assert rendezvous("j", s, Replica("worker", 2)) == "j-worker-0.j"
    assert rendezvous("j", s, Replica("worker", 0)) is None


@pytest.mark.parametrize(
    ("nproc", "world", "per_node"),
    [(None, "3", "auto"), ("4", "12", "4"), ("gpu", "3", "gpu")],  # a number multiplies the world size
)
def test_nproc_per_node(nproc: str | None, world: str, per_node: str) -> None:
    s = trainer_spec(image="i", framework="pytorch", topology={"workers": 2}, nprocPerNode=nproc)
    env = framework_env("j", "ns", s, Replica("worker", 0))
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == (world, per_node)


def test_a_port_of_the_spec_replaces_the_frameworks() -> None:
    s = trainer_spec(image="i", framework="pytorch", port=29400)
    assert framework_env("j", "ns", s, Replica("worker", 0))["MASTER_PORT"] == "29400"
    tf = trainer_spec(image="i", framework="tensorflow", port=2223, topology={"workers": 2})
    assert ":2223" in framework_env("j", "ns", tf, Replica("worker", 0))["TF_CONFIG"]


def test_tf_config_names_the_chief_and_the_evaluator_as_tensorflow_does() -> None:
    s = spec("tensorflow", workers=2, chief=1, evaluators=1)
    config = json.loads(framework_env("j", "n", s, Replica("evaluator", 0))["TF_CONFIG"])
    assert config["cluster"] == {
        "chief": ["j-chief-0.j.n.svc:2222"],
        "evaluator": ["j-evaluator-0.j.n.svc:2222"],
        "worker": ["j-worker-0.j.n.svc:2222", "j-worker-1.j.n.svc:2222"],
    }
    assert config["task"] == {"type": "evaluator", "index": 0}


@pytest.mark.parametrize(
    ("framework", "extra", "replica", "shard", "shards"),
    [
        ("pytorch", {}, Replica("master", 0), "0", "3"),
        ("pytorch", {}, Replica("worker", 1), "2", "3"),
        ("pytorch", {"master": 0}, Replica("worker", 1), "1", "2"),
        ("tensorflow", {"chief": 1}, Replica("chief", 0), "0", "3"),
        ("tensorflow", {"chief": 1}, Replica("worker", 0), "1", "3"),
        ("tensorflow", {"chief": 1, "evaluators": 1}, Replica("evaluator", 0), None, "3"),  # writes no shard
        ("tensorflow", {"parameterServers": 1}, Replica("ps", 0), None, "2"),
    ],
)
def test_each_replica_that_checkpoints_has_its_own_shard(
    framework: str, extra: dict[str, int], replica: Replica, shard: str | None, shards: str
) -> None:
    s = trainer_spec(image="i", framework=framework, topology={"workers": 2, **extra}, checkpoint={"bucket": "b"})
    env = operator_env("j", "u", s, replica)
    assert (env.get("CHECKPOINT_SHARD"), env["CHECKPOINT_SHARDS"]) == (shard, shards)


def test_a_run_without_epochs_gets_no_epochs_variable() -> None:
    assert "EPOCHS" not in operator_env("j", "u", trainer_spec(epochs=None), Replica("worker", 0))
