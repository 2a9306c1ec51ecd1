"""What the trainer controller puts into training pods (DESIGN §5) that other concerns must know:
the variables it sets itself (a contribution cannot set them: the operator's value wins; the
profile controller reports such a clash; a trainer unit test keeps the list complete), the
training container's name and which roles a run has.
"""

from .api.trainer import TrainerSpec

# Kubeflow's default container names (TF_CONFIG only goes to "tensorflow").
TRAINING_CONTAINER = {
    "pytorch": "pytorch",
    "tensorflow": "tensorflow",
    "jax": "jax",
    "xgboost": "xgboost",
    "generic": "trainer",
}


# Labels on every pod of a run (the trainer sets them; the quota controller counts pods by them).
REPLICA_TYPE_LABEL = "trainer.operator.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "trainer.operator.kubeflow.org/replica-index"
TRAINER_UID_LABEL = "trainer.operator.kubeflow.org/trainer-uid"

# The quota admission (status.quota.contribution.grant.id) a pod was created under; the trainer
# replaces pods of an earlier admission (the run moved to other capacity or lost its admission).
ADMISSION_ANNOTATION = "trainer.operator.kubeflow.org/admission"
# The node the admission placed the pod's replica on (the pod is pinned to it by node affinity).
NODE_ANNOTATION = "trainer.operator.kubeflow.org/node"


def has_master(spec: TrainerSpec) -> bool:
    """pytorch and xgboost runs have a master, except elastic pytorch (rendezvous on worker 0)."""
    return spec.framework in ("pytorch", "xgboost") and not (spec.framework == "pytorch" and spec.topology.elastic)


OPERATOR_ENV = frozenset(
    {
        # The operator's own contract, every framework.
        "TRAINER_NAME",
        "TRAINER_UID",
        "REPLICA_TYPE",
        "REPLICA_INDEX",
        "EPOCHS",
        "CHECKPOINT_DIR",
        "RESUME_FROM",
        "CHECKPOINT_REPLICATION_FACTOR",
        "CHECKPOINT_SHARDS",
        "CHECKPOINT_INTERVAL_MINUTES",
        "POD_NAME",
        # Kubeflow-compatible rendezvous variables.
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "TF_CONFIG",
        "COORDINATOR_ADDRESS",
        "COORDINATOR_PORT",
        "NUM_PROCESSES",
        "PROCESS_ID",
        "WORKER_PORT",
        "WORKER_ADDRS",
        "PYTHONUNBUFFERED",
    }
)
OPERATOR_ENV_PREFIXES = ("PET_",)  # torch elastic (torchrun) settings


def set_by_operator(name: str) -> bool:
    return name in OPERATOR_ENV or name.startswith(OPERATOR_ENV_PREFIXES)
