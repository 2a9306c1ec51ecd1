"""Which replicas a Trainer has and the environment each one gets (pure).

The framework contracts reproduce what Kubeflow's Training Operator v1 sets for the same
topology (pkg/controller.v1/{pytorch,tensorflow,jax,xgboost}), so training code written for
Kubeflow runs unchanged:

- pytorch: a master plus N workers; MASTER_ADDR/PORT, WORLD_SIZE, RANK, PET_*; port 23456.
  With ``topology.elastic`` there is no master: torchrun's c10d rendezvous on worker 0.
- tensorflow: workers and parameter servers; TF_CONFIG with the cluster and the task; port 2222.
- jax: workers; COORDINATOR_ADDRESS/PORT (worker 0), NUM_PROCESSES, PROCESS_ID; port 6666.
- xgboost: a master plus N workers; MASTER_*, WORLD_SIZE, RANK, WORKER_PORT, WORKER_ADDRS; 9999.
- generic: workers and parameter servers; only the operator's own variables.

Every replica also gets EPOCHS, TRAINER_NAME, TRAINER_UID, REPLICA_TYPE and REPLICA_INDEX, and
CHECKPOINT_SHARDS when it checkpoints (CHECKPOINT_DIR and RESUME_FROM come with the checkpoint
controller's contribution).
"""

import json
from dataclasses import dataclass

from trainerop_common.api.trainer import Framework, TrainerSpec
from trainerop_common.contracts import TRAINING_CONTAINER
from trainerop_common.topology import Role, has_master, role_counts, shard_writers


@dataclass(frozen=True)
class FrameworkContract:
    container: str
    port_name: str
    port: int


CONTRACTS: dict[Framework, FrameworkContract] = {
    "pytorch": FrameworkContract(TRAINING_CONTAINER["pytorch"], "pytorchjob-port", 23456),
    "tensorflow": FrameworkContract(TRAINING_CONTAINER["tensorflow"], "tfjob-port", 2222),
    "jax": FrameworkContract(TRAINING_CONTAINER["jax"], "jaxjob-port", 6666),
    "xgboost": FrameworkContract(TRAINING_CONTAINER["xgboost"], "xgboostjob-port", 9999),
    "generic": FrameworkContract(TRAINING_CONTAINER["generic"], "trainer-port", 29500),
}


@dataclass(frozen=True, order=True)
class Replica:
    role: Role
    index: int

    def name(self, trainer: str) -> str:
        """Pod name and hostname: <trainer>-<role>-<index>, as Kubeflow names them."""
        return f"{trainer}-{self.role}-{self.index}"

    def address(self, trainer: str, per_replica_services: bool = False) -> str:
        """The replica's stable DNS name in its namespace: its hostname under the Trainer's one
        headless Service, <trainer>-<role>-<index>.<trainer> (as JobSet and Kubeflow Trainer v2
        name theirs); for a Trainer started by an earlier version, which made a Service per
        replica, that Service's name <trainer>-<role>-<index> (its running pods have no hostname
        under the Trainer's Service, so only the old names reach them)."""
        return self.name(trainer) if per_replica_services else f"{self.name(trainer)}.{trainer}"


def replicas(spec: TrainerSpec) -> list[Replica]:
    return [Replica(role, i) for role, n in role_counts(spec).items() for i in range(n)]


def rendezvous(trainer: str, spec: TrainerSpec, replica: Replica, per_replica_services: bool = False) -> str | None:
    """The address this replica must be able to resolve before it starts, if any."""
    if has_master(spec):
        return Replica("master", 0).address(trainer, per_replica_services) if replica.role != "master" else None
    if spec.framework in ("pytorch", "jax"):
        first = Replica("worker", 0)
        return first.address(trainer, per_replica_services) if replica != first else None
    return None


def framework_env(
    trainer: str, namespace: str, spec: TrainerSpec, replica: Replica, per_replica_services: bool = False
) -> dict[str, str]:
    """The Kubeflow-compatible variables of one replica (values exactly as Kubeflow sets them)."""
    counts = role_counts(spec)
    contract = CONTRACTS[spec.framework]
    port = str(contract.port)

    def address(role: Role, index: int) -> str:
        return Replica(role, index).address(trainer, per_replica_services)

    master = address("master", 0)
    worker0 = address("worker", 0)
    total = sum(counts.values())
    rank = replica.index + (1 if replica.role == "worker" and counts["master"] else 0)
    if spec.framework == "pytorch":
        env = {"PYTHONUNBUFFERED": "0"}
        if counts["master"]:
            env |= {
                "MASTER_ADDR": master,
                "MASTER_PORT": port,
                "PET_MASTER_ADDR": master,
                "PET_MASTER_PORT": port,
                "WORLD_SIZE": str(total),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
                "PET_NPROC_PER_NODE": "auto",
                "PET_NNODES": str(total),
            }
        elastic = spec.topology.elastic
        if elastic is not None:
            env |= {
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": f"{worker0}:{port}",
                "PET_NNODES": f"{elastic.min_workers}:{elastic.max_workers}",
            }
        return env
    if spec.framework == "tensorflow":
        if total <= 1:
            return {}
        cluster = {
            role: [f"{address(role, i)}.{namespace}.svc:{port}" for i in range(n)]
            for role, n in sorted(counts.items())
            if n
        }
        tf_config = {"cluster": cluster, "task": {"type": replica.role, "index": replica.index}, "environment": "cloud"}
        return {"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}
    if spec.framework == "jax":
        return {
            "PYTHONUNBUFFERED": "1",
            "COORDINATOR_ADDRESS": worker0,
            "COORDINATOR_PORT": port,
            "NUM_PROCESSES": str(total),
            "PROCESS_ID": str(replica.index),
        }
    if spec.framework == "xgboost":
        env = {
            "MASTER_ADDR": master,
            "MASTER_PORT": port,
            "WORLD_SIZE": str(total),
            "RANK": str(rank),
            "PYTHONUNBUFFERED": "0",
        }
        if total > 1:
            env["WORKER_PORT"] = port
            env["WORKER_ADDRS"] = ",".join(address("worker", i) for i in range(counts["worker"]))
        return env
    return {}


def operator_env(trainer: str, uid: str, spec: TrainerSpec, replica: Replica) -> dict[str, str]:
    """The operator's own contract (docs/trainer.md), the same for every framework. ``spec`` is the
    run as admitted: a checkpoint has a shard per replica that writes one, as many as the pods the
    trainer creates (the quota grant's workers), so it can commit."""
    env = {
        "TRAINER_NAME": trainer,
        "TRAINER_UID": uid,
        "REPLICA_TYPE": replica.role,
        "REPLICA_INDEX": str(replica.index),
        "EPOCHS": str(spec.epochs),
    }
    if spec.checkpoint is not None:
        env["CHECKPOINT_SHARDS"] = str(shard_writers(spec))
    return env
