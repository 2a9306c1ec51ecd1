"""Which replicas a Trainer has and the environment each one gets (pure).

The framework contracts reproduce what Kubeflow's Training Operator v1 sets for the same
topology (pkg/controller.v1/{pytorch,tensorflow,jax,xgboost}), so training code written for
Kubeflow runs unchanged:

- pytorch: a master plus N workers; MASTER_ADDR/PORT, WORLD_SIZE, RANK, PET_*; port 23456.
  With ``topology.elastic`` there is no master: torchrun's c10d rendezvous on worker 0. With
  ``topology.master: 0`` worker 0 is the master (MASTER_ADDR; ranks are the workers' indices).
- tensorflow: workers, parameter servers, a chief or a master, evaluators; TF_CONFIG with the
  cluster and the task; port 2222.
- jax: workers; COORDINATOR_ADDRESS/PORT (worker 0), NUM_PROCESSES, PROCESS_ID; port 6666.
- xgboost: a master plus N workers; MASTER_*, WORLD_SIZE, RANK, WORKER_PORT, WORKER_ADDRS; 9999.
- generic: workers and parameter servers; only the operator's own variables.

``spec.port`` replaces the framework's port. Every replica also gets TRAINER_NAME, TRAINER_UID,
REPLICA_TYPE and REPLICA_INDEX, EPOCHS when the spec says, and CHECKPOINT_SHARDS when it
checkpoints, with CHECKPOINT_SHARD on each replica that writes one (CHECKPOINT_DIR and
RESUME_FROM come with the checkpoint controller's contribution).
"""

import json
from dataclasses import dataclass

from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.contracts import CONTRACTS
from trainerop_common.names import replica_name
from trainerop_common.topology import Role, has_master, leader, role_counts, shard_writers


@dataclass(frozen=True, order=True)
class Replica:
    role: Role
    index: int

    def name(self, trainer: str) -> str:
        return replica_name(trainer, self.role, self.index)

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


def port(spec: TrainerSpec) -> int:
    """The rendezvous port: spec.port, else the framework's."""
    return spec.port or CONTRACTS[spec.framework].port


@dataclass(frozen=True)
class Cluster:
    """What one replica's variables are made of: the run's counts and addresses."""

    trainer: str
    namespace: str
    spec: TrainerSpec
    per_replica_services: bool

    @property
    def counts(self) -> dict[Role, int]:
        return role_counts(self.spec)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def address(self, role: Role, index: int) -> str:
        return Replica(role, index).address(self.trainer, self.per_replica_services)

    def rank(self, replica: Replica) -> int:
        """Kubeflow's rank: the master 0 and worker i i + 1, or worker i i without a master."""
        return replica.index + (1 if replica.role == "worker" and self.counts["master"] else 0)


def pytorch_env(c: Cluster, replica: Replica) -> dict[str, str]:
    """A master (or worker 0 when the run has none) is MASTER_ADDR; a numeric nprocPerNode
    multiplies WORLD_SIZE; elastic runs rendezvous with c10d on worker 0, which is its own
    endpoint as localhost: torchrun hosts the store where the endpoint's name is the machine's,
    and worker 0's name may not resolve to it yet when it starts (its agent would then wait for a
    store no one hosts)."""
    spec = c.spec
    nproc = spec.nproc_per_node or "auto"
    world = c.total * (int(nproc) if nproc.isdigit() else 1)
    master = c.address("master", 0) if c.counts["master"] else c.address("worker", 0)
    rank = str(c.rank(replica))
    env = {"PYTHONUNBUFFERED": "0"}
    elastic = spec.topology.elastic
    if elastic is None:
        env |= {"MASTER_ADDR": master, "MASTER_PORT": str(port(spec)), "WORLD_SIZE": str(world), "RANK": rank}
        env |= {"PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(port(spec)), "PET_NODE_RANK": rank}
        return env | {"PET_NPROC_PER_NODE": nproc, "PET_NNODES": str(c.total)}
    env["PET_NPROC_PER_NODE"] = nproc  # as Kubeflow v1 defaults it for an elastic job too
    host = "localhost" if replica == Replica("worker", 0) else c.address("worker", 0)
    return env | {
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{host}:{port(spec)}",
        "PET_NNODES": f"{elastic.min_workers}:{elastic.max_workers}",
    }


def tensorflow_env(c: Cluster, replica: Replica) -> dict[str, str]:
    """TF_CONFIG: every role's addresses under its lower-case name, and this replica's task."""
    if c.total <= 1:
        return {}
    cluster = {
        role: [f"{c.address(role, i)}.{c.namespace}.svc:{port(c.spec)}" for i in range(n)]
        for role, n in sorted(c.counts.items())
        if n
    }
    tf_config = {"cluster": cluster, "task": {"type": replica.role, "index": replica.index}, "environment": "cloud"}
    return {"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}


def jax_env(c: Cluster, replica: Replica) -> dict[str, str]:
    return {
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": c.address("worker", 0),
        "COORDINATOR_PORT": str(port(c.spec)),
        "NUM_PROCESSES": str(c.total),
        "PROCESS_ID": str(replica.index),
    }


def xgboost_env(c: Cluster, replica: Replica) -> dict[str, str]:
    env = {
        "MASTER_ADDR": c.address("master", 0),
        "MASTER_PORT": str(port(c.spec)),
        "WORLD_SIZE": str(c.total),
        "RANK": str(c.rank(replica)),
        "PYTHONUNBUFFERED": "0",
    }
    if c.total > 1:
        env["WORKER_PORT"] = str(port(c.spec))
        env["WORKER_ADDRS"] = ",".join(c.address("worker", i) for i in range(c.counts["worker"]))
    return env


FRAMEWORK_ENV = {"pytorch": pytorch_env, "tensorflow": tensorflow_env, "jax": jax_env, "xgboost": xgboost_env}


def framework_env(
    trainer: str, namespace: str, spec: TrainerSpec, replica: Replica, per_replica_services: bool = False
) -> dict[str, str]:
    """The Kubeflow-compatible variables of one replica (values as Kubeflow sets them)."""
    make = FRAMEWORK_ENV.get(spec.framework)
    return make(Cluster(trainer, namespace, spec, per_replica_services), replica) if make else {}


def shard(spec: TrainerSpec, replica: Replica) -> int | None:
    """The checkpoint shard a replica writes: the master or chief 0, then the workers in order;
    None for parameter servers and evaluators."""
    leaders = 1 if leader(spec) else 0
    if replica.role in ("master", "chief"):
        return 0
    return replica.index + leaders if replica.role == "worker" else None


def operator_env(trainer: str, uid: str, spec: TrainerSpec, replica: Replica) -> dict[str, str]:
    """The operator's own contract (docs/trainer.md), the same for every framework. ``spec`` is the
    run as admitted: a checkpoint has a shard per replica that writes one, as many as the pods the
    trainer creates (the quota grant's workers), so it can commit."""
    env = {
        "TRAINER_NAME": trainer,
        "TRAINER_UID": uid,
        "REPLICA_TYPE": replica.role,
        "REPLICA_INDEX": str(replica.index),
    }
    if spec.epochs is not None:
        env["EPOCHS"] = str(spec.epochs)
    index = shard(spec, replica)
    if spec.checkpoint is not None:
        env["CHECKPOINT_SHARDS"] = str(shard_writers(spec))
        if index is not None:
            env["CHECKPOINT_SHARD"] = str(index)
    return env
